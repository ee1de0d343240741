"""What a user notices beyond errors: leftovers of killed runs cleaned up, invalid UTF-8
counted honestly, the thread count chosen for the work, a time budget that validates often
and ends with what was learned."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from lmlab.cli import main
from lmlab.commands.pretrain_summary import _loss_lines, summary, unigram_loss
from lmlab.config.training import TrainConfig
from lmlab.data.dataset import in_memory_dataset
from lmlab.data.preparation import prepare
from lmlab.eval.texts import file_text
from lmlab.kernels.machine import threads_for
from lmlab.objectives import SpecialTokens
from lmlab.runs import load_run
from lmlab.runs.metrics import loss_name, read_metrics
from lmlab.train.entry import pretrain
from tests.hf_runs import pretrained_run

TEXT = "the cat sat on the mat. the dog sat on the log. " * 3


def test_a_killed_prepare_leaves_nothing_the_next_one_keeps(tmp_path):
    (tmp_path / "a.txt").write_text("\n\n".join(f"{i} {TEXT}" for i in range(40)))
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    abandoned = tmp_path / f".data.partial-{gone}-x1"
    running = tmp_path / f".data.partial-{os.getpid()}-x2"  # a prepare still at work
    other = tmp_path / f".other.partial-{gone}-x3"  # another output's: not this one's to judge
    for directory in (abandoned, running, other):
        directory.mkdir()
        (directory / "train.tokens.bin").write_bytes(b"\0" * 64)
    prepare([str(tmp_path / "a.txt")], tmp_path / "data", vocab_size=300,
            blank_line_documents=True, near_dedup_threshold=None)
    assert not abandoned.exists() and running.exists() and other.exists()


def test_invalid_utf8_counts_as_the_bytes_it_was(tmp_path, capsys):
    raw = b"caf\xe9 au lait, na\xefve r\xe9sum\xe9 " * 4  # Latin-1, not UTF-8: 16 bad bytes
    (tmp_path / "latin1.txt").write_bytes(raw)
    run = load_run(pretrained_run(tmp_path / "run", "gpt2", "clm"))
    text = file_text([str(tmp_path / "latin1.txt")], run)
    assert (text.bytes, text.invalid_utf8_bytes) == (len(raw), 16)
    code = main(["eval", str(tmp_path / "run"), "--data", str(tmp_path / "latin1.txt")])
    assert code == 0
    assert "16 bytes were not UTF-8" in capsys.readouterr().out


def test_prepare_reports_invalid_utf8_where_it_is_seen(tmp_path, capsys):
    (tmp_path / "a.jsonl").write_bytes(b'{"text": "caf\xe9 ' + TEXT.encode() + b'"}\n'
                                       + b"".join(b'{"text": "%d %s"}\n' % (i, TEXT.encode())
                                                  for i in range(30)))
    assert main(["prepare", str(tmp_path / "a.jsonl"), "--out", str(tmp_path / "data"),
                 "--vocab-size", "300", "--no-near-dedup"]) == 0
    err = capsys.readouterr().err
    assert "note: 1 documents held invalid UTF-8: 1 bytes replaced by U+FFFD" in err


@pytest.mark.parametrize("rows,requested,environment,expected", [
    (1, None, {}, 1),  # one prompt: one thread
    (64, None, {}, "all"),  # a large batch keeps every core
    (1, 2, {}, 2),  # --threads
    (1, None, {"OMP_NUM_THREADS": "2"}, "all"),  # the user's environment is left alone
])
def test_inference_threads_fit_the_work(rows, requested, environment, expected, monkeypatch):
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    before = torch.get_num_threads()
    with threads_for(rows, requested):
        inside = torch.get_num_threads()
    assert inside == (before if expected == "all" else expected)
    assert torch.get_num_threads() == before


def test_curves_are_named_in_words():
    assert loss_name("mlm/mlm_loss") == "validation loss (masked tokens)"
    assert loss_name("clm/clm_loss") == "validation loss (next token)"
    assert loss_name("mlm+nsp/nsp_loss") == "validation loss (next-sentence prediction, mlm+nsp)"


def test_a_time_budget_validates_often_and_ends_with_what_was_learned(tmp_path):
    rng = np.random.default_rng(0)
    special = SpecialTokens.layout(64)
    documents = [rng.integers(10, 64, 40) for _ in range(400)]
    dataset = in_memory_dataset(documents[:360], documents[360:], special)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model: one thread is faster on a busy machine
    try:
        config = TrainConfig(objective="mlm", model="bert-tiny", seq_len=32, batch_size=8,
                             minutes=0.05, out=str(tmp_path / "run"))
        out = pretrain(config, dataset)
    finally:
        torch.set_num_threads(threads)
    records = read_metrics(out)
    evals = [r for r in records if r["kind"] == "eval"]
    assert len(evals) >= 8  # twelve spread over the three seconds, and the last
    # what the run did is what config.json says: no fixed interval (none), not 200
    assert json.loads((out / "config.json").read_text())["train"]["eval_every"] is None
    assert (out / "curves.png").is_file()
    baseline = unigram_loss(dataset)
    assert baseline == pytest.approx(np.log(54), abs=0.05)  # uniform over 54 ordinary ids
    lines = summary(Path(out), dataset, config)
    assert "validation loss (masked tokens)" in lines
    assert f"a model of token frequencies alone: {baseline:.2f} nats" in lines
    assert "lmlab pretrain --objective mlm" in lines


def test_the_run_sets_only_token_losses_beside_the_frequency_model(tmp_path):
    """An RTD run's discriminator loss (λ × BCE) is no vocabulary cross-entropy: it gets no
    perplexity, and the generator's loss is the one held against token frequencies."""
    special = SpecialTokens.layout(64)
    documents = [np.arange(10, 50) for _ in range(10)]
    dataset = in_memory_dataset(documents[:8], documents[8:], special)
    record = {"kind": "eval", "step": 10, "rtd/generator_loss": 3.0, "rtd/generator_ppl": 20.1,
              "rtd/discriminator_loss": 20.05, "rtd/replaced_fraction": 0.14}
    (tmp_path / "metrics.jsonl").write_text(json.dumps(record) + "\n")
    lines = _loss_lines(tmp_path, dataset)
    assert len(lines) == 2 and "generator" in lines[0] and "discriminator" not in "".join(lines)
    assert lines[1].endswith("below it: the model uses the context")


@pytest.fixture(scope="module")
def short_context_runs(tmp_path_factory):
    """Masked, hybrid and alternating runs with a 16-token context, on in-memory data."""
    rng = np.random.default_rng(1)
    special = SpecialTokens.layout(80, n_sentinels=10)
    documents = [rng.integers(20, 80, 40) for _ in range(60)]
    dataset = in_memory_dataset(documents[:50], documents[50:], special)
    root = tmp_path_factory.mktemp("short")
    runs = {}
    for objective in ("mlm", "mix:clm=1,mlm=15", "alternate:span,prefix@1"):
        config = TrainConfig(objective=objective, model="bert-tiny", seq_len=16, batch_size=4,
                             steps=2, out=str(root / objective.replace(":", "-")))
        runs[objective] = (pretrain(config, dataset), config)
    return dataset, runs


@pytest.mark.parametrize("objective", ["mlm", "mix:clm=1,mlm=15", "alternate:span,prefix@1"])
def test_the_summary_example_is_held_out_text_within_the_context(short_context_runs, objective):
    dataset, runs = short_context_runs
    out, config = runs[objective]
    lines = summary(out, dataset, config)
    assert "could not be shown" not in lines
    example = "fill-mask on held-out text" if "mlm" in objective else "continuation of held-out"
    assert example in lines


def test_an_example_that_fails_is_one_line_and_the_summary_goes_on(short_context_runs,
                                                                  monkeypatch):
    import lmlab.commands.pretrain_summary as pretrain_summary

    def broken(*args, **kwargs):
        raise RuntimeError("no candidates\nsecond line")

    monkeypatch.setattr(pretrain_summary, "fill_mask", broken)
    dataset, runs = short_context_runs
    out, config = runs["mlm"]
    lines = summary(out, dataset, config).splitlines()
    assert "  (the example could not be shown: no candidates)" in lines
    assert lines[-1].startswith("  lmlab pretrain --objective mlm")


def test_an_eval_every_given_with_a_time_budget_is_kept(tmp_path):
    """200 given by hand is the user's interval, not the default's twelve spread validations."""
    rng = np.random.default_rng(0)
    special = SpecialTokens.layout(64)
    documents = [rng.integers(10, 64, 40) for _ in range(400)]
    dataset = in_memory_dataset(documents[:360], documents[360:], special)
    config = TrainConfig(objective="mlm", model="bert-tiny", seq_len=32, batch_size=8,
                         minutes=0.02, eval_every=200, out=str(tmp_path / "run"))
    with threads_for(1):
        out = pretrain(config, dataset)
    records = read_metrics(out)
    last_step = max(r["step"] for r in records)
    # every 200 steps and at the end, however fast the machine; spread would give twelve
    assert all(r["step"] % 200 == 0 or r["step"] == last_step
               for r in records if r["kind"] == "eval")
    assert json.loads((out / "config.json").read_text())["train"]["eval_every"] == 200
