"""`lmlab fill-mask`, `lmlab generate` and `lmlab embed` as a user meets them: texts from
arguments, files and stdin, JSON output, .npy files, and one-line errors for bad input."""

import io
import json
import random
import shutil

import numpy as np
import pytest
import torch

from lmlab.cli import main
from lmlab.config.training import TrainConfig
from lmlab.data.dataset import in_memory_dataset
from lmlab.data.preparation.tokenizer_training import train_tokenizer
from lmlab.data.tokenizer import special_tokens_of
from lmlab.train.entry import pretrain

WORDS = ["the", "cat", "dog", "sees", "likes", "a", "bird", "runs", "home", "fast"]
CONTEXT = 32


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Runs trained for two steps on a toy text: enough to exercise every path."""
    root = tmp_path_factory.mktemp("runs")
    rng = random.Random(0)
    texts = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 30))) + "."
             for _ in range(200)]
    tokenizer = train_tokenizer(texts, vocab_size=300, n_sentinels=8)
    ids = [e.ids for e in tokenizer.encode_batch(texts)]
    dataset = in_memory_dataset(ids[:180], ids[180:], special_tokens_of(tokenizer))
    dataset.tokenizer_json = tokenizer.to_str()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: one thread is faster on a busy machine
    made = {}
    try:
        for objective in ["mix:clm=1,mlm=1", "mlm", "span"]:
            config = TrainConfig(objective=objective, model="gpt2-tiny", seq_len=CONTEXT,
                                 out=str(root / objective.replace(":", "-")), batch_size=8,
                                 steps=2, eval_every=2, log_every=1)
            made[objective] = str(pretrain(config, dataset))
    finally:
        torch.set_num_threads(threads)
    return made


def run_cli(capsys, *args, stdin: str | None = None, monkeypatch=None):
    if stdin is not None:
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_fill_mask_ranks_candidates_for_each_mask(runs, capsys):
    code, out, _ = run_cli(capsys, "fill-mask", runs["mix:clm=1,mlm=1"], "--top-k", "3",
                           "the cat [MASK] the dog.", "a [MASK] runs [MASK] fast.")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "the cat [MASK] the dog." and lines[2] == "a [MASK] runs [MASK] fast."
    assert [line.split(":")[0] for line in lines[1:2] + lines[3:5]] == ["  1", "  1", "  2"]
    probabilities = [float(p) for p in lines[1].replace(")", "(").split("(")[1::2]]
    assert len(probabilities) == 3 and probabilities == sorted(probabilities, reverse=True)


def test_fill_mask_reads_a_file_or_stdin_and_writes_json(runs, capsys, tmp_path, monkeypatch):
    texts = "the [MASK] sees a bird.\n\nthe dog [MASK] home.\n"
    (tmp_path / "texts.txt").write_text(texts)
    code, from_file, _ = run_cli(capsys, "fill-mask", runs["mlm"], "--file",
                                 str(tmp_path / "texts.txt"), "--json")
    assert code == 0
    code, from_stdin, _ = run_cli(capsys, "fill-mask", runs["mlm"], "--json",
                                  stdin=texts, monkeypatch=monkeypatch)
    assert code == 0 and from_stdin == from_file
    records = [json.loads(line) for line in from_file.splitlines()]
    assert [r["text"] for r in records] == ["the [MASK] sees a bird.", "the dog [MASK] home."]
    (candidates,) = records[0]["masks"]
    assert len(candidates) == 5 and set(candidates[0]) == {"token", "id", "probability"}
    assert 0 < sum(c["probability"] for c in candidates) <= 1 + 1e-6


def test_generate_prints_the_prompt_and_its_continuation(runs, capsys):
    code, out, _ = run_cli(capsys, "generate", runs["mix:clm=1,mlm=1"], "the cat",
                           "--max-new-tokens", "6", "--greedy")
    assert code == 0 and out.startswith("the cat") and out.endswith("\n")


def test_generate_samples_reproducibly_as_json(runs, capsys):
    args = ["generate", runs["mix:clm=1,mlm=1"], "--seed", "3", "--num-samples", "2",
            "--max-new-tokens", "5", "--json", "the dog"]
    code, out, _ = run_cli(capsys, *args)
    assert code == 0 and run_cli(capsys, *args)[1] == out
    records = [json.loads(line) for line in out.splitlines()]
    assert len(records) == 2 and all(r["prompt"] == "the dog" for r in records)
    assert all(len(r["ids"]) <= 5 and r["finish_reason"] in ("eos", "length") for r in records)


def test_generate_infills_gaps_for_a_span_model(runs, capsys):
    code, out, _ = run_cli(capsys, "generate", runs["span"], "the [X] sees [Y] bird.",
                           "--max-new-tokens", "8", "--seed", "0", "--json")
    assert code == 0
    record = json.loads(out)
    assert len(record["fills"]) == 2
    assert record["text"] == "the" + record["fills"][0] + " sees" + record["fills"][1] + " bird."


def test_truncate_left_lets_a_long_prompt_through(runs, capsys):
    long_prompt = " ".join(["the cat sees the dog"] * 20)
    code, out, _ = run_cli(capsys, "generate", runs["mix:clm=1,mlm=1"], long_prompt,
                           "--truncate-left", "--max-new-tokens", "4", "--json")
    assert code == 0 and len(json.loads(out)["ids"]) <= 4


def test_embed_writes_one_vector_per_text(runs, capsys, tmp_path, monkeypatch):
    out_path = tmp_path / "vectors.npy"
    code, out, _ = run_cli(capsys, "embed", runs["mlm"], "--out", str(out_path), "--normalize",
                           stdin="the cat runs.\na dog sees the bird fast.\n",
                           monkeypatch=monkeypatch)
    assert code == 0 and "2 embeddings of 64 dimensions" in out
    vectors = np.load(out_path)
    assert vectors.shape == (2, 64)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    code, _, _ = run_cli(capsys, "embed", runs["mlm"], "the cat runs.", "--pooling", "cls",
                         "--out", str(out_path))
    assert code == 0 and np.load(out_path).shape == (1, 64)


@pytest.fixture
def broken_runs(runs, tmp_path):
    """A run directory without checkpoints, and one without its configuration."""
    no_checkpoints = tmp_path / "no-checkpoints"
    shutil.copytree(runs["mlm"], no_checkpoints)
    shutil.rmtree(no_checkpoints / "checkpoints")
    (tmp_path / "no-config").mkdir()
    return {"no-checkpoints": str(no_checkpoints), "no-config": str(tmp_path / "no-config"),
            "missing": str(tmp_path / "missing")}


@pytest.mark.parametrize("args,message", [
    (["fill-mask", "missing", "a [MASK]."], "missing: no such run directory"),
    (["fill-mask", "no-config", "a [MASK]."], "no-config: not an lmlab run (no config.json)"),
    (["embed", "no-checkpoints", "a cat.", "--out", "x.npy"], "no complete checkpoint"),
    (["fill-mask", "mix:clm=1,mlm=1", "a cat [MASK].", "a cat."], "text 2 has no [MASK] token"),
    (["generate", "mix:clm=1,mlm=1", " ".join(["the cat sees the dog"] * 20)],
     "longer than the model's context of 32; shorten it or pass --truncate-left"),
    (["generate", "span", "the [W] sees the dog."], "unknown sentinel syntax '[W]'"),
    (["generate", "mlm", "the cat"], "trained with mlm only, which reads text "
     "bidirectionally and never learns to predict the next token, so it cannot generate"),
    (["generate", "mix:clm=1,mlm=1", "the cat", "--top-p", "1.5"], "top_p must be in (0, 1]"),
    (["embed", "mlm", "a cat.", "--out", "x.npy", "--ids", "3 x"], "'x' is not a token id"),
])
def test_bad_input_is_one_line_and_exit_1(runs, broken_runs, capsys, args, message):
    places = {**runs, **broken_runs}
    args = [places.get(arg, arg) if i == 1 else arg for i, arg in enumerate(args)]
    code, _, err = run_cli(capsys, *args)
    assert code == 1
    assert err.count("\n") == 1 and err.startswith("lmlab: error: ")
    assert message in err
