"""`lmlab pretrain` end to end on a synthetic language: run directory, exact resume after
SIGKILL, accumulation, non-finite losses, signals, DDP, and the learning floor."""

import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from lmlab.config.training import TrainConfig
from lmlab.runs.checkpoints import list_checkpoints, verify_checkpoint
from lmlab.runs.metrics import read_metrics
from lmlab.train import entry as pretraining
from lmlab.train import loop
from tests.synthetic_run import synthetic_dataset

SCRIPT = Path(__file__).with_name("synthetic_run.py")
SMALL = ["--model", "gpt2-tiny", "--seq-len", "32", "--lr", "3e-3", "--log-every", "1"]


def run_script(out: Path, *args: str, launcher=(sys.executable,), wait=True, env=None):
    command = [*launcher, str(SCRIPT), "--out", str(out), *SMALL, *args]
    env = None if env is None else {**os.environ, **env}
    if not wait:
        return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                env=env)
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def train_losses(run: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in read_metrics(run) if r["kind"] == "train"}


def config(tmp_path, **changes) -> TrainConfig:
    base = dict(objective="clm", model="gpt2-tiny", out=str(tmp_path / "run"), seq_len=32,
                batch_size=8, steps=6, lr=3e-3, log_every=1, eval_every=3, checkpoint_every=3)
    return TrainConfig(**{**base, **changes})


def test_a_run_leaves_a_usable_directory(tmp_path):
    out = pretraining.pretrain(config(tmp_path, objective="mlm", model="bert-tiny"),
                        synthetic_dataset()[1])
    assert {p.name for p in out.iterdir()} >= {"config.json", "metrics.jsonl", "curves.png",
                                               "checkpoints"}
    saved = json.loads((out / "config.json").read_text())
    assert saved["train"]["objective"] == "mlm" and saved["model"]["n_layers"] == 2
    evals = [r for r in read_metrics(out) if r["kind"] == "eval"]
    assert [r["step"] for r in evals] == [3, 6]
    assert all(0 < r["mfu"] < 1 and r["tokens_per_second"] > 0
               for r in read_metrics(out) if r["kind"] == "train")
    assert {"mlm/mlm_loss", "mlm/mlm_ppl", "mlm/mlm_bpb", "mlm/accuracy"} <= set(evals[-1])
    assert verify_checkpoint(list_checkpoints(out / "checkpoints")[-1])["step"] == 6


@pytest.mark.slow
def test_resume_after_sigkill_reproduces_every_step_bitwise(tmp_path):
    args = ["--objective", "clm", "--steps", "150", "--batch-size", "8",
            "--micro-batch-size", "4", "--checkpoint-every", "7", "--eval-every", "50",
            "--model-overrides", '{"dropout": 0.1}']
    # One thread: what is proven is that resume restores every state (weights, optimizer,
    # random streams, data order). Once, in a full suite run (never alone), the uninterrupted
    # run differed from others in the last float bits, most likely a multi-threaded product
    # summed in another order; one thread leaves no such freedom.
    one_thread = {"OMP_NUM_THREADS": "1"}
    run_script(tmp_path / "whole", *args, env=one_thread)
    expected = train_losses(tmp_path / "whole")
    killed = tmp_path / "killed"
    process = run_script(killed, *args, wait=False, env=one_thread)
    deadline = time.time() + 120
    while time.time() < deadline and max(train_losses(killed), default=0) < 25:
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)  # lands mid-step, often mid-accumulation
    process.wait()
    stopped_at = max(train_losses(killed))
    assert stopped_at < 150, "the run finished before it could be killed"
    # Without a checkpoint, --resume would start afresh and match just as well.
    saved = list_checkpoints(killed / "checkpoints")
    assert saved, "no checkpoint was written before the kill"
    resumed_from = verify_checkpoint(saved[-1])["step"]
    assert 1 <= resumed_from <= stopped_at
    before = [r for r in read_metrics(killed) if r["step"] <= resumed_from]
    run_script(killed, *args, "--resume", env=one_thread)
    # Records up to the checkpoint are the killed run's own, timings included: not redone.
    assert [r for r in read_metrics(killed) if r["step"] <= resumed_from] == before
    assert train_losses(killed) == expected  # bitwise: same floats at every step


def test_accumulated_micro_batches_equal_one_batch(tmp_path, monkeypatch):
    # One matmul kernel for both: the oneDNN path depends on the rows per call, and its sums in
    # another order are what the last float bits below would then compare.
    monkeypatch.setenv("LMLAB_ONEDNN", "0")
    dataset = synthetic_dataset()[1]
    no_dropout = {"dropout": 0.0}  # dropout masks depend on the micro-batch shape
    whole = pretraining.pretrain(config(tmp_path, out=str(tmp_path / "a"), steps=1, batch_size=8,
                                 micro_batch_size=8, model_overrides=no_dropout), dataset)
    parts = pretraining.pretrain(config(tmp_path, out=str(tmp_path / "b"), steps=1, batch_size=8,
                                 micro_batch_size=2, model_overrides=no_dropout), dataset)
    assert train_losses(whole)[1] == pytest.approx(train_losses(parts)[1], rel=1e-5)
    weights = [load_file(list_checkpoints(r / "checkpoints")[-1] / "model.safetensors")
               for r in (whole, parts)]
    # Adam's first update is about lr·sign(gradient), so a gradient that differs in its last
    # float bits can move a weight by a hair: 1e-5 is 0.3% of the step size lr = 3e-3.
    for name in weights[0]:
        torch.testing.assert_close(weights[0][name], weights[1][name], atol=1e-5, rtol=1e-5)


class NaNAfter:
    """Wraps an objective so its loss is NaN from a given step on (via the batch's step)."""

    def __init__(self, objective, first_bad_step, last_bad_step=10**9):
        self.objective, self.first, self.last = objective, first_bad_step, last_bad_step

    def __getattr__(self, name):  # every trait as the wrapped objective's
        return getattr(self.objective, name)

    def for_run(self, total_steps):
        return NaNAfter(self.objective.for_run(total_steps), self.first, self.last)

    def make_batch(self, tokens, generator, step=0):
        batch = self.objective.make_batch(tokens, generator, step)
        batch.extras["step"] = torch.tensor(step)
        return batch

    def target_counts(self, batch):
        return self.objective.target_counts(batch)

    def loss(self, outputs, batch):
        result = self.objective.loss(outputs, batch)
        if self.first <= int(batch.extras["step"]) <= self.last:
            result.terms = {k: (s * math.nan, c) for k, (s, c) in result.terms.items()}
        return result


def inject_nan(monkeypatch, first, last=10**9):
    build = pretraining.build_objective
    monkeypatch.setattr(pretraining, "build_objective",
                        lambda *a, **k: NaNAfter(build(*a, **k), first, last))


def test_a_non_finite_step_is_skipped_and_counted(tmp_path, monkeypatch):
    inject_nan(monkeypatch, first=2, last=2)
    out = pretraining.pretrain(config(tmp_path), synthetic_dataset()[1])
    records = [r for r in read_metrics(out) if r["kind"] == "train"]
    assert [r["step"] for r in records if r.get("skipped_nonfinite")] == [3]
    assert all(math.isfinite(r["loss"]) for r in records if not r.get("skipped_nonfinite"))
    state = torch.load(list_checkpoints(out / "checkpoints")[-1] / "state.pt",
                       weights_only=True)
    assert state["loop"]["nonfinite_steps"] == 1


def test_repeated_non_finite_losses_stop_the_run_with_the_checkpoint_intact(tmp_path,
                                                                           monkeypatch):
    inject_nan(monkeypatch, first=4)
    with pytest.raises(loop.TrainingError, match="not finite for 2 steps in a row.*"
                                                 "step-00000003"):
        pretraining.pretrain(config(tmp_path, steps=20, max_nonfinite_steps=2),
                             synthetic_dataset()[1])
    last = list_checkpoints(tmp_path / "run" / "checkpoints")[-1]
    assert verify_checkpoint(last)["step"] == 3


@pytest.mark.slow
@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_saves_a_checkpoint_then_exits_128_plus_its_number(tmp_path, signum, code):
    out = tmp_path / "run"
    process = run_script(out, "--objective", "clm", "--steps", "100000", "--batch-size", "4",
                         "--checkpoint-every", "100000", wait=False)
    deadline = time.time() + 120
    while time.time() < deadline and max(train_losses(out), default=0) < 5:
        time.sleep(0.02)
    process.send_signal(signum)
    assert process.wait(timeout=60) == code, process.stderr.read().decode()[-2000:]
    step = verify_checkpoint(list_checkpoints(out / "checkpoints")[-1])["step"]
    assert step >= 5 and step == max(train_losses(out))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(nproc: int) -> tuple[str, ...]:
    """A fresh port per launch: a port the previous launch just closed may still be held."""
    return (sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
            "--master-port", str(free_port()))


@pytest.mark.slow
@pytest.mark.parametrize("strategy, optimizer", [("ddp", "adamw"), ("fsdp", "adamw"),
                                                 ("ddp", "muon")])
def test_two_processes_match_one_process_and_resume(tmp_path, strategy, optimizer):
    args = ["--objective", "clm", "--steps", "6", "--batch-size", "8",
            "--micro-batch-size", "4", "--checkpoint-every", "3", "--keep-last", "5",
            "--optimizer", optimizer,
            "--model-overrides", '{"dropout": 0.0}']  # dropout draws differ per rank
    run_script(tmp_path / "one", *args)
    args += ["--distributed", strategy]
    run_script(tmp_path / "ddp", *args, launcher=torchrun(2))
    one, ddp = train_losses(tmp_path / "one"), train_losses(tmp_path / "ddp")
    assert one.keys() == ddp.keys() == set(range(1, 7))
    for step in one:
        assert ddp[step] == pytest.approx(one[step], rel=1e-4), step
    # resume under DDP from step 3: the redone steps match the first pass
    shutil.rmtree(tmp_path / "ddp" / "checkpoints" / "step-00000006")
    run_script(tmp_path / "ddp", *args, "--resume", launcher=torchrun(2))
    again = train_losses(tmp_path / "ddp")
    assert all(again[s] == pytest.approx(ddp[s], rel=1e-6) for s in range(4, 7))
    if strategy == "fsdp":  # optimizer state stays sharded: one file per rank
        names = {p.name for p in list_checkpoints(tmp_path / "ddp" / "checkpoints")[-1].iterdir()}
        assert {"optimizer-rank-0.pt", "optimizer-rank-1.pt", "model.safetensors"} <= names


@pytest.mark.slow
def test_learning_floor_through_pretrain(tmp_path):
    chain, dataset = synthetic_dataset()
    out = pretraining.pretrain(config(tmp_path, steps=300, batch_size=32, seq_len=64,
                               eval_every=100, checkpoint_every=1000), dataset)
    entropy = chain.entropy_rate()
    # 60 symbols then [EOS] per document: 59 transitions at the entropy rate, and the [EOS]
    # after the 60th symbol, which a model that knows positions predicts for free.
    floor = entropy * 59 / 60
    evals = [r["clm/clm_loss"] for r in read_metrics(out) if r["kind"] == "eval"]
    assert all(loss > floor - 0.03 for loss in evals), (evals, floor)
    assert evals[-1] < 1.10 * entropy, (evals, entropy)
