"""`then:A,B@FRACTION`: the first objective for the first share of the run's steps, then the
second, switching at the promised step, resuming exactly across the switch, and counting its
FLOPs phase by phase."""

import shutil

import pytest
import torch
from safetensors.torch import load_file

from lmlab.config import ModelConfig
from lmlab.config.presets import preset
from lmlab.config.training import TrainConfig
from lmlab.model import LanguageModel
from lmlab.model.flops import flops_per_token, objective_flops_per_token
from lmlab.objectives import CausalLM, MaskedLM, SpecialTokens, Then
from lmlab.objectives.registry import build_objective, split_specs
from lmlab.runs.checkpoints import list_checkpoints
from lmlab.runs.metrics import read_metrics
from lmlab.train import entry as pretraining
from tests.conftest import random_block, seeded
from tests.synthetic_run import synthetic_dataset


def test_the_spec_builds_the_sequence(special):
    sequence = build_objective("then:clm,mlm@0.75", special)
    assert isinstance(sequence, Then) and sequence.fraction == 0.75
    assert [type(o) for o in sequence.objectives] == [CausalLM, MaskedLM]
    assert set(sequence.heads) == {"lm", "mlm"}
    assert sequence.can_generate and sequence.fill_mask_head == ("mlm", 0)
    # a list of specs keeps the sequence's comma, as it keeps a mixture's
    assert split_specs("mlm,then:clm,mlm@0.75") == ["mlm", "then:clm,mlm@0.75"]


@pytest.mark.parametrize("spec,message", [
    ("then:clm,mlm", "a sequence needs '@FRACTION'"),
    ("then:clm,mlm@x", "a sequence needs '@FRACTION'"),
    ("then:clm,mlm@1", r"the switch must come within the run \(0 < fraction < 1\)"),
    ("then:clm,mlm@0", r"0 < fraction < 1"),
    ("then:clm@0.5", "a sequence takes two objectives"),
    ("then:clm,mlm,span@0.5", "a sequence takes two objectives"),
    ("then:clm,bert@0.5", "unknown objective 'bert'"),
])
def test_bad_sequences_are_one_line(special, spec, message):
    with pytest.raises(ValueError, match=message):
        build_objective(spec, special)


@pytest.mark.parametrize("fraction,total_steps,switch", [
    (0.75, 1000, 750), (0.5, 4, 2), (0.5, 5, 3), (0.75, 10, 8), (0.29, 100, 29), (0.5, 1, 1)])
def test_the_switch_is_at_the_rounded_share_of_the_run(special, fraction, total_steps, switch):
    sequence = Then([CausalLM(special), MaskedLM(special)], fraction).for_run(total_steps)
    assert sequence.switch_step == switch
    kinds = [sequence.make_batch(random_block(special, 2, 8), seeded(), step=s).mask.kind
             for s in range(total_steps)]
    assert kinds == ["causal"] * switch + ["bidirectional"] * (total_steps - switch)


def test_before_the_run_length_is_known_it_trains_the_first(special):
    sequence = build_objective("then:clm,mlm@0.5", special)
    assert sequence.switch_step is None and sequence.index_at(10**6) == 0


def test_every_batch_asks_both_heads_and_both_get_a_gradient(special):
    sequence = build_objective("then:clm,mlm@0.5", special).for_run(2)
    model = LanguageModel(preset("gpt2-tiny", special.vocab_size, 64), heads=sequence.heads)
    for step, trained in ((0, "clm"), (1, "mlm")):
        batch = sequence.make_batch(random_block(special, 4, 16), seeded(step), step)
        assert set(batch.predict_at) == {"lm", "mlm"}
        loss = sequence.loss(model(**batch.model_inputs()), batch)
        counts = sequence.target_counts(batch)
        assert set(loss.terms) == set(counts) == {trained}
        assert int(counts[trained]) == int(loss.terms[trained][1])
        model.zero_grad()
        loss.mean().backward()
        assert all(p.grad is not None for p in model.parameters())  # as DDP requires


CFG = ModelConfig(vocab_size=1000, n_layers=2, d_model=64, n_heads=2)
SPECIAL = SpecialTokens.layout(1000, n_sentinels=20)
T, ROWS = 128, 32


def test_flops_are_counted_phase_by_phase():
    clm, mlm = (objective_flops_per_token(CFG, T, build_objective(spec, SPECIAL), ROWS)
                for spec in ("clm", "mlm"))
    sequence = build_objective("then:clm,mlm@0.75", SPECIAL)
    # two heads are asked for in every batch: the last block runs everywhere, as for clm
    full = flops_per_token(CFG, T, 0.15)
    # a run of unknown length: 3/4 clm and 1/4 mlm at the full last block
    assert objective_flops_per_token(CFG, T, sequence, ROWS) == pytest.approx(
        0.75 * clm + 0.25 * full, rel=1e-12)
    # 10 steps switch at 8 (rounded half up): 8 clm, 2 mlm
    assert objective_flops_per_token(CFG, T, sequence.for_run(10), ROWS) == pytest.approx(
        0.8 * clm + 0.2 * full, rel=1e-12)
    assert mlm < full  # a masked LM alone runs its last block at the masked share only


def test_one_shared_head_counts_each_phase_last_block():
    clm, mntp = (build_objective(spec, SPECIAL) for spec in ("clm", "mntp"))
    sequence = build_objective("then:clm,mntp@0.5", SPECIAL).for_run(4)
    assert sequence.heads == ("lm",)
    assert sequence.last_block_fraction(ROWS, T) == pytest.approx(
        0.5 * clm.last_block_fraction(ROWS, T) + 0.5 * mntp.last_block_fraction(ROWS, T))


def train_config(out, **changes) -> TrainConfig:
    base = dict(objective="then:clm,mlm@0.5", model="gpt2-tiny", out=str(out), seq_len=32,
                batch_size=8, steps=6, lr=3e-3, log_every=1, eval_every=3, checkpoint_every=2,
                keep_last=5, model_overrides={"dropout": 0.1})
    return TrainConfig(**{**base, **changes})


def train_rows(run) -> list[dict]:
    rows = [r for r in read_metrics(run) if r["kind"] == "train"]
    return [{k: v for k, v in r.items() if not k.startswith(("tokens_per", "mfu", "seconds"))}
            for r in rows]


def test_a_run_switches_at_the_promised_step_and_resumes_exactly_across_it(tmp_path):
    dataset = synthetic_dataset()[1]
    whole = pretraining.pretrain(train_config(tmp_path / "whole"), dataset)
    rows = train_rows(whole)
    # 6 steps switch at round(0.5 × 6) = 3: steps 1-3 train clm, 4-6 mlm
    assert [("clm_loss" in r, "mlm_loss" in r) for r in rows] == (
        [(True, False)] * 3 + [(False, True)] * 3)
    # stopped after step 2 (the checkpoints after it lost): the resume redoes steps 3-6,
    # across the switch, bit for bit
    cut = tmp_path / "cut"
    shutil.copytree(whole, cut)
    for later in list_checkpoints(cut / "checkpoints")[1:]:
        shutil.rmtree(later)
    assert [p.name for p in list_checkpoints(cut / "checkpoints")] == ["step-00000002"]
    pretraining.pretrain(train_config(cut, resume=True), dataset)
    assert train_rows(cut) == rows
    final = [load_file(list_checkpoints(r / "checkpoints")[-1] / "model.safetensors")
             for r in (whole, cut)]
    assert final[0].keys() == final[1].keys()
    assert all(torch.equal(final[0][name], final[1][name]) for name in final[0])
