"""A training step never waits on the device: its work reads nothing back to the host, a step
whose loss is not finite is skipped on the device (weights, moments and step count left as they
were), and the skipped steps are counted and logged at the next log step."""

import math

import numpy as np
import pytest
import torch
from torch.overrides import TorchFunctionMode

from lmlab import SpecialTokens
from lmlab.data.dataset import in_memory_dataset
from lmlab.kernels import linear_cross_entropy as fused
from lmlab.runs.checkpoints import list_checkpoints
from lmlab.runs.metrics import read_metrics
from lmlab.train import entry as pretraining
from lmlab.train import loop
from lmlab.train.optim import Muon, Optimizers, make_optimizer
from lmlab.train.step import guarded_update
from tests.synthetic_run import synthetic_dataset
from tests.test_pretrain import config, inject_nan

# Reads of a value, and ops whose output size depends on values (on a GPU the host waits for
# both): nonzero, and indexing by a boolean mask.
HOST_READS = {"item", "tolist", "__bool__", "__float__", "__int__", "__index__", "nonzero",
              "masked_select", "unique"}


def boolean_index(func, args) -> bool:
    if getattr(func, "__name__", "") != "__getitem__" or len(args) < 2:
        return False
    index = args[1] if isinstance(args[1], tuple) else (args[1],)
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in index)


class HostReads(TorchFunctionMode):
    """Records everything that makes the host wait for a GPU: reading a tensor's value, and
    ops whose output's size depends on values."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in HOST_READS or boolean_index(func, args):
            self.reads.append(func.__name__)
        return func(*args, **(kwargs or {}))


def random_dataset():
    """Random documents of 20-token sentences, over a vocabulary with T5's sentinels too."""
    special = SpecialTokens.layout(80, n_sentinels=8)
    first, rng = max(special.all_ids) + 1, np.random.default_rng(0)
    documents = [rng.integers(first, special.vocab_size, 60) for _ in range(200)]
    dataset = in_memory_dataset(documents, documents[:20], special)
    for source in (dataset.train, dataset.validation):
        starts = np.arange(0, source.num_tokens - 20, 20)
        source.sentences = np.stack((starts, starts + 20), axis=1)
    return dataset


@pytest.mark.parametrize("objective, model", [
    ("mlm", "bert-tiny"), ("mlm+nsp", "bert-tiny"), ("mntp", "gpt2-tiny"), ("clm", "gpt2-tiny"),
    ("prefix", "gpt2-tiny"), ("span", "gpt2-tiny"), ("mix:clm=1,mlm=1", "gpt2-tiny"),
    ("alternate:clm,mlm@2", "gpt2-tiny")])
def test_a_steps_device_work_reads_nothing_back(tmp_path, monkeypatch, objective, model):
    reads = []
    device_step = loop.device_step

    def watched(*args):
        with HostReads() as mode:
            result = device_step(*args)
        reads.append(mode.reads)
        return result

    monkeypatch.setattr(loop, "device_step", watched)
    # as on a GPU: the fused loss does not look for the rows that carry a target
    monkeypatch.setattr(fused, "_rows_with_targets", lambda targets: None)
    pretraining.pretrain(config(tmp_path, objective=objective, model=model, steps=3,
                                micro_batch_size=4), random_dataset())
    assert reads == [[], [], []]


def optimizer_state(optimizer):
    return [{k: v.clone() for k, v in state.items()} for state in optimizer.state.values()]


def optimizer_named(name: str, model: torch.nn.Linear):
    if name == "fused":
        return make_optimizer(model, lr=0.1)
    if name == "muon":  # Muon's matrix, AdamW's bias
        return Optimizers(Muon([model.weight], lr=0.1, weight_decay=0.1),
                          torch.optim.AdamW([model.bias], lr=0.1, fused=True))
    return torch.optim.AdamW(model.parameters(), lr=0.1)


@pytest.mark.parametrize("name", ["fused", "unfused", "muon"])
def test_a_skipped_update_changes_no_weight_and_no_optimizer_state(name):
    model = torch.nn.Linear(4, 3)
    optimizer = optimizer_named(name, model)
    for skip in (False, True):
        before = [p.detach().clone() for p in model.parameters()]
        moments = optimizer_state(optimizer)
        model(torch.randn(2, 4)).square().sum().mul(math.nan if skip else 1.0).backward()
        guarded_update(optimizer, None, torch.tensor(skip))
        assert all(p.grad is None for p in model.parameters())
        changed = [not torch.equal(a, p) for a, p in zip(before, model.parameters(),
                                                         strict=True)]
        assert changed == [not skip] * 2
    for saved, state in zip(moments, optimizer_state(optimizer), strict=True):
        assert saved
        assert all(torch.equal(saved[k], state[k]) for k in saved)


def test_skipped_steps_between_log_lines_are_counted_at_the_next(tmp_path, monkeypatch):
    inject_nan(monkeypatch, first=2, last=3)  # steps 3 and 4 of 8
    out = pretraining.pretrain(config(tmp_path, steps=8, log_every=4, eval_every=8,
                                      checkpoint_every=8), synthetic_dataset()[1])
    records = {r["step"]: r for r in read_metrics(out) if r["kind"] == "train"}
    assert sorted(records) == [4, 8]
    assert records[4]["skipped_nonfinite"] == 2 and math.isnan(records[4]["loss"])
    assert "skipped_nonfinite" not in records[8] and math.isfinite(records[8]["loss"])
    state = torch.load(list_checkpoints(out / "checkpoints")[-1] / "state.pt",
                       weights_only=True)
    assert state["loop"]["nonfinite_steps"] == 2 and state["loop"]["nonfinite_streak"] == 0


def test_a_long_non_finite_streak_between_log_lines_still_stops_the_run(tmp_path, monkeypatch):
    inject_nan(monkeypatch, first=1, last=3)  # steps 2 to 4, then finite again
    with pytest.raises(loop.TrainingError, match="not finite for 3 steps in a row"):
        pretraining.pretrain(config(tmp_path, steps=8, log_every=6, eval_every=8,
                                    checkpoint_every=8, max_nonfinite_steps=3),
                             synthetic_dataset()[1])
