"""`lmlab pretrain --init RUN[:CHECKPOINT]` end to end on tiny runs: the new run computes the
source's logits and embeddings before its first update (lmlab runs pre-trained and fine-tuned,
imported BERT, GPT-2 and Llama), records where it came from, starts a fresh optimizer and step
count, resumes exactly, exports, and refuses bad input in one line with nothing written."""

from __future__ import annotations

import copy
import json
import math
import random
import shutil
import subprocess
import sys

import pytest
import torch

from lmlab.cli import main
from lmlab.commands.pretrain_summary import summary
from lmlab.config.training import TrainConfig
from lmlab.data.dataset import in_memory_dataset, open_dataset
from lmlab.data.preparation.tokenizer_training import train_tokenizer
from lmlab.data.tokenizer import special_tokens_of
from lmlab.export.importer import import_hf
from lmlab.finetune.entry import finetune
from lmlab.model import MaskSpec
from lmlab.runs.checkpoints import list_checkpoints, sha256_of
from lmlab.runs.metrics import read_metrics
from lmlab.runs.run import load_run
from lmlab.serve.runs import RunTable
from lmlab.tasks.finetune_config import FinetuneConfig
from lmlab.train import entry as pretraining
from tests.test_hf_import import saved_bert, saved_gpt2, saved_llama
from tests.test_pretrain import SCRIPT, run_script, torchrun, train_losses

WORDS = ["the", "cat", "dog", "sees", "likes", "a", "bird", "runs", "home", "fast", "good",
         "bad"]
TEXTS = [" ".join(random.Random(i).choices(WORDS, k=random.Random(-i).randint(5, 30))) + "."
         for i in range(240)]
TINY = dict(seq_len=32, batch_size=8, steps=2, eval_every=2, log_every=1, warmup_steps=1)


def dataset_of(tokenizer):
    """TEXTS tokenised with `tokenizer`, in memory, keeping its tokenizer.json as a prepared
    dataset does."""
    ids = [e.ids for e in tokenizer.encode_batch(TEXTS, add_special_tokens=False)]
    dataset = in_memory_dataset(ids[:200], ids[200:], special_tokens_of(tokenizer))
    dataset.tokenizer_json = tokenizer.to_str()
    return dataset


def run_dataset(run):
    """TEXTS tokenised with run `run`'s tokenizer, its special tokens by the run's roles."""
    loaded = load_run(run)
    ids = [e.ids for e in loaded.tokenizer.encode_batch(TEXTS, add_special_tokens=False)]
    dataset = in_memory_dataset(ids[:200], ids[200:], loaded.special)
    dataset.tokenizer_json = (run / "tokenizer.json").read_text()
    return dataset


@pytest.fixture(scope="module")
def toy():
    return dataset_of(train_tokenizer(TEXTS, vocab_size=300, n_sentinels=4))


@pytest.fixture(scope="module")
def source(toy, tmp_path_factory):
    """A causal lmlab run with checkpoints step-00000002 and step-00000004."""
    out = tmp_path_factory.mktemp("source") / "clm"
    return pretraining.pretrain(TrainConfig(objective="clm", model="gpt2-tiny", out=str(out),
                                            checkpoint_every=2, **{**TINY, "steps": 4}), toy)


class FirstModel:
    """Patches run_training to keep a copy of the model the loop receives, before any step."""

    def __init__(self, monkeypatch):
        self.model = None
        real = pretraining.run_training

        def keep(training):
            self.model = copy.deepcopy(training.model).eval()
            return real(training)

        monkeypatch.setattr(pretraining, "run_training", keep)


@torch.no_grad()
def assert_computes_as(model, source_run, heads, causal: bool):
    """Hidden states, embeddings and each of `heads`' logits equal the source's."""
    ids = torch.randint(10, model.cfg.vocab_size, (2, 16),
                        generator=torch.Generator().manual_seed(5))
    mask = MaskSpec("causal" if causal else "bidirectional")
    ours, theirs = model(ids, mask), source_run.model(ids, mask)
    assert torch.equal(model.backbone.token_embedding.weight,
                       source_run.model.backbone.token_embedding.weight)
    assert torch.equal(ours["hidden"], theirs["hidden"])
    for head in heads:
        assert torch.equal(ours[head], theirs[head]), head


def test_an_lmlab_run_continues_from_its_weights(source, toy, tmp_path, monkeypatch):
    first = FirstModel(monkeypatch)
    out = pretraining.pretrain(TrainConfig(objective="then:clm,mlm@0.5", out=str(tmp_path / "c"),
                                           init=f"{source}:step-00000002",
                                           head_warmup_steps=0, **TINY), toy)
    assert_computes_as(first.model, load_run(source, "step-00000002"), ("lm",), causal=True)
    saved = json.loads((out / "config.json").read_text())
    assert saved["init"] == {
        "run": "../../" + source.parent.name + "/clm", "checkpoint": "step-00000002",
        "weights_sha256": sha256_of(source / "checkpoints/step-00000002/model.safetensors")}
    assert (out / saved["init"]["run"]).resolve() == source.resolve()
    assert saved["model"] == json.loads((source / "config.json").read_text())["model"]
    # a fresh step count (the source had trained 2 steps) and schedule
    rows = [r for r in read_metrics(out) if r["kind"] == "train"]
    assert [r["step"] for r in rows] == [1, 2]
    assert [p.name for p in list_checkpoints(out / "checkpoints")] == ["step-00000002"]
    loaded = load_run(out)
    assert set(loaded.model.heads) == {"lm", "mlm"}
    assert (out / "tokenizer.json").read_text() == (source / "tokenizer.json").read_text()
    assert f"continued from {source} (step-00000002, weights SHA-256 " in summary(
        out, toy, TrainConfig(init=str(source)))
    (served,) = RunTable.load([out]).describe()["runs"]
    assert served["init"] == saved["init"]


def test_a_resumed_continuation_continues_exactly(source, toy, tmp_path):
    settings = dict(objective="clm", init=str(source), out=str(tmp_path / "whole"),
                    checkpoint_every=1, keep_last=5, **{**TINY, "steps": 3})
    whole = pretraining.pretrain(TrainConfig(**settings), toy)
    cut = shutil.copytree(whole, tmp_path / "cut")
    for later in list_checkpoints(cut / "checkpoints")[1:]:
        shutil.rmtree(later)
    pretraining.pretrain(TrainConfig(**{**settings, "out": str(cut), "resume": True}), toy)

    def losses(run):
        return [r["loss"] for r in read_metrics(run) if r["kind"] == "train"]

    assert losses(cut) == losses(whole) and len(losses(whole)) == 3


def test_zero_steps_keep_the_source_as_it_came(source, toy, tmp_path):
    """--steps 0 with --init: a run of the source's weights, validated at step 0 and saved as
    its one checkpoint, which other commands (compare's control) read as any run."""
    out = pretraining.pretrain(TrainConfig(objective="clm", init=str(source),
                                           out=str(tmp_path / "kept"),
                                           **{**TINY, "steps": 0, "warmup_steps": 0}),
                               toy)
    assert [p.name for p in list_checkpoints(out / "checkpoints")] == ["step-00000000"]
    kept, given = load_run(out, "last").model.state_dict(), load_run(source).model.state_dict()
    assert kept.keys() == given.keys()
    assert all(torch.equal(kept[name], given[name]) for name in given)
    records = read_metrics(out)
    assert [(r["kind"], r["step"]) for r in records] == [("eval", 0)]
    assert math.isfinite(records[0]["clm/clm_loss"])


def test_a_fine_tuned_run_gives_its_backbone(source, toy, tmp_path, monkeypatch):
    labelled = tmp_path / "sentiment.tsv"
    labelled.write_text("label\tsentence\n" + "".join(
        f"{label}\t{TEXTS[i]}\n" for i, label in enumerate(["good", "bad"] * 8)))
    tuned = finetune(source, FinetuneConfig(task="classify", train=str(labelled),
                                            validation=str(labelled), steps=1, batch_size=4,
                                            out=str(tmp_path / "tuned")))
    first = FirstModel(monkeypatch)
    pretraining.pretrain(TrainConfig(objective="mlm", init=str(tuned), out=str(tmp_path / "c"),
                                     **TINY), toy)
    assert set(first.model.heads) == {"mlm"}  # the task's classifier is left behind
    assert_computes_as(first.model, load_run(tuned), (), causal=False)


IMPORTED = {  # source → (how it is saved, the objective continued with, heads it keeps)
    "bert-encoder": (saved_bert, {"class_name": "BertModel"}, "mlm", ()),
    "bert-mlm": (saved_bert, {"class_name": "BertForMaskedLM"}, "mlm", ("mlm",)),
    "gpt2": (saved_gpt2, {}, "clm", ("lm",)),
    "llama-gqa": (saved_llama, {}, "clm", ("lm",)),
}


@pytest.mark.parametrize("name", IMPORTED)
def test_an_imported_run_continues_from_its_weights(name, tmp_path, monkeypatch):
    save, options, objective, kept = IMPORTED[name]
    save(tmp_path / "hf", **options)
    imported = import_hf(tmp_path / "hf", tmp_path / "imported").out
    first = FirstModel(monkeypatch)
    out = pretraining.pretrain(TrainConfig(objective=objective, init=str(imported),
                                           out=str(tmp_path / "c"), **TINY),
                               run_dataset(imported))
    assert_computes_as(first.model, load_run(imported), kept, causal=name.startswith(("gpt",
                                                                                      "llama")))
    loaded = load_run(out)  # the imported tokenizer's roles come along
    assert loaded.special == load_run(imported).special


def pretrain_cli(capsys, *args) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["pretrain", *map(str, args)])
    err = capsys.readouterr().err.strip().splitlines()
    return code, err[-1] if err else ""


@pytest.fixture
def refused(toy, monkeypatch, capsys, tmp_path):
    """`lmlab pretrain --init ...` on the toy dataset that must refuse in one line and write
    nothing: the line."""
    monkeypatch.setattr("lmlab.data.preparation.entry.open_or_prepare", lambda path: toy)

    def run(*args):
        out = tmp_path / "never"
        code, line = pretrain_cli(capsys, "--objective", "clm", "--steps", "1", "--out", out,
                                  *args)
        assert code == 1 and not out.exists(), line
        return line

    return run


def test_bad_sources_are_one_line_and_write_nothing(source, refused, tmp_path):
    assert refused("--init", tmp_path) == (f"lmlab: error: --init {tmp_path}: {tmp_path}: not "
                                           "an lmlab run (no config.json)")
    damaged = shutil.copytree(source, tmp_path / "damaged")
    weights = damaged / "checkpoints/step-00000004/model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1] + b"!")
    assert refused("--init", f"{damaged}:last", "--seq-len", "32") == (
        f"lmlab: error: --init {damaged}:last: checkpoint file {weights} is missing or corrupt "
        f"(checksum mismatch); start from the previous one with --init "
        f"{damaged}:step-00000002")


def test_options_that_would_change_the_model_are_one_line(source, refused):
    assert refused("--init", source, "--model", "bert-tiny") == (
        f"lmlab: error: --init takes the model from {source}; leave out --model, which would "
        "change it")
    assert refused("--init", source, "--model-overrides", '{"dropout": 0.1}',
                   "--model", "gpt2-tiny").endswith(
        "leave out --model and --model-overrides, which would change it")
    # the source learnt positions up to its --seq-len 32
    assert refused("--init", source, "--seq-len", "64") == (
        f"lmlab: error: --seq-len 64 is longer than {source}'s context: its learned positions "
        "stop at 32 tokens; give --seq-len 32 or less")


def test_data_of_another_tokenizer_is_one_line(source, tmp_path, monkeypatch, capsys):
    other = dataset_of(train_tokenizer(TEXTS, vocab_size=280, n_sentinels=4))
    monkeypatch.setattr("lmlab.data.preparation.entry.open_or_prepare", lambda path: other)
    out = tmp_path / "never"
    code, line = pretrain_cli(capsys, "--init", source, "--seq-len", "32", "--objective", "clm",
                              "--data", "elsewhere", "--out", out)
    assert code == 1 and not out.exists()
    assert line == (f"lmlab: error: --data elsewhere was tokenised with another tokenizer than "
                    f"{source}'s; prepare the text with the source's: lmlab prepare TEXT "
                    f"--tokenizer {source} --out DIR")


def test_a_shorter_context_is_allowed(source, toy, tmp_path):
    out = pretraining.pretrain(TrainConfig(objective="clm", init=str(source),
                                           out=str(tmp_path / "c"), **{**TINY, "seq_len": 16}),
                               toy)
    assert load_run(out).max_seq_len == 32  # the model keeps the source's context


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_a_continuation_under_torchrun_matches_one_process(tmp_path, strategy):
    """Two processes (gloo) continuing a run with `then:clm,mlm@0.5` train as one: equal
    losses on the causal steps (masks are drawn per rank after the switch), finite after."""
    run_script(tmp_path / "source", "--objective", "clm", "--steps", "2",
               "--model-overrides", '{"dropout": 0.0}')  # dropout draws differ per rank
    args = ["--init", str(tmp_path / "source"), "--seq-len", "32", "--lr", "3e-3",
            "--log-every", "1", "--objective", "then:clm,mlm@0.5", "--steps", "4",
            "--batch-size", "8", "--micro-batch-size", "4", "--checkpoint-every", "4",
            "--optimizer", "adamw",  # what auto picks under FSDP2, for both sides
            "--head-warmup-steps", "0"]  # which torchrun's wrappers cannot do
    for name, launcher, extra in (("one", (sys.executable,), []),
                                  ("two", torchrun(2), ["--distributed", strategy])):
        done = subprocess.run([*launcher, str(SCRIPT), "--out", str(tmp_path / name), *args,
                               *extra],
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
    one, two = train_losses(tmp_path / "one"), train_losses(tmp_path / "two")
    assert one.keys() == two.keys() == {1, 2, 3, 4}
    assert all(two[step] == pytest.approx(one[step], rel=1e-4) for step in (1, 2))
    assert all(math.isfinite(loss) for loss in two.values())


def test_prepare_takes_a_runs_tokenizer_and_its_roles(tmp_path, capsys):
    saved_bert(tmp_path / "hf", class_name="BertModel")
    bert = import_hf(tmp_path / "hf", tmp_path / "bert").out
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"text": text}) + "\n" for text in TEXTS))
    assert main(["prepare", str(corpus), "--out", str(tmp_path / "data"),
                 "--tokenizer", str(bert)]) == 0
    dataset = open_dataset(tmp_path / "data")
    special = load_run(bert).special
    assert dataset.special == special and special.eos is None
    # without [EOS], BERT's [SEP] ends each document
    assert dataset.train.read(0, dataset.train.num_tokens).tolist().count(special.sep) == sum(
        1 for start, stop in dataset.train.document_spans())
    code, _ = pretrain_cli(capsys, "--init", bert, "--data", tmp_path / "data", "--objective",
                           "mlm", "--seq-len", "32", "--steps", "1", "--batch-size", "4",
                           "--out", tmp_path / "continued")
    assert code == 0
    capsys.readouterr()
    assert main(["prepare", str(corpus), "--out", str(tmp_path / "never"),
                 "--tokenizer", str(tmp_path / "hf")]) == 1
    assert capsys.readouterr().err.strip() == (
        f"lmlab: error: --tokenizer {tmp_path / 'hf'}: a directory must be an lmlab run "
        f"({tmp_path / 'hf' / 'config.json'}: unreadable run configuration ('train')); import "
        "a Hugging Face model first with lmlab import")
    assert not (tmp_path / "never").exists()
