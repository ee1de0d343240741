"""`prepare` with worker processes makes the dataset one process makes, byte for byte: the same
cleaning decisions (planted exact and near duplicates, quality rejections), the same
tokenizer, shards, offsets, meta.json and stats.txt, on both routes (a tokenizer trained on
spilled documents, a given tokenizer streamed) and for a weighted mix."""

import json

import numpy as np
import pytest

from lmlab.data.preparation import prepare
from lmlab.data.preparation.parallel import PARALLEL_MIN_BYTES, worker_count

WORDS = ("the quick brown fox jumps over a lazy dog while seven wizards quietly judge boxes "
         "of pale green glass near old river banks and every morning bright birds sing").split()
RECIPE = {"vocab_size": 400, "sentinels": 4, "validation_fraction": 0.2}


def corpus(seed: int, count: int) -> list[str]:
    """`count` documents of 60-120 words, shuffled with planted ones: 40 exact copies (some
    with other line ends or surrounding spaces, the same once cleaned), 40 near copies (one
    word changed), 20 too short for Gopher's rules and a blank one."""
    rng = np.random.default_rng(seed)
    texts = [" ".join(rng.choice(WORDS, size=rng.integers(60, 120))) + "." for _ in range(count)]
    exact = [texts[i] if i % 2 else f"  {texts[i]}\r\n" for i in rng.choice(count, 40)]
    near = []
    for i in rng.choice(count, 40, replace=False):
        words = texts[i].split()
        near.append(" ".join([*words[:30], "zebra", *words[31:]]))
    short = [f"{' '.join(rng.choice(WORDS, size=10))} {n}." for n in range(20)]
    everything = [*texts, *exact, *near, *short, "   "]
    return [everything[i] for i in rng.permutation(len(everything))]


def write_jsonl(path, texts):
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    return str(path)


def dataset_files(directory) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(directory.iterdir())}


@pytest.mark.parametrize("case", ["trained tokenizer", "given tokenizer", "weighted mix"])
def test_two_workers_write_the_same_bytes_as_one(tmp_path, case):
    texts = corpus(0, 1500)
    first = write_jsonl(tmp_path / "a.jsonl", texts[:900])
    second = write_jsonl(tmp_path / "b.jsonl", texts[900:])
    sources, recipe = [first, second], dict(RECIPE, quality_filter=True)
    if case == "given tokenizer":
        recipe["tokenizer"] = str(prepare(sources, tmp_path / "trained", **RECIPE) /
                                  "tokenizer.json")
    if case == "weighted mix":
        sources = [f"{first}:0.7", f"{second}:0.3"]
    one = prepare(sources, tmp_path / "one", workers=1, **recipe)
    two = prepare(sources, tmp_path / "two", workers=2, **recipe)
    assert dataset_files(one) == dataset_files(two)
    cleaning = json.loads((two / "meta.json").read_text())["cleaning"]
    assert cleaning["quality_rejected"]["word_count"] == 20 and cleaning["empty"] == 1
    if case != "weighted mix":  # a mix dedups each source apart: copies across them stay
        assert cleaning["exact_duplicates"] == 40
        assert cleaning["near_duplicates"] >= 30  # MinHash's S-curve catches most


def test_the_number_of_workers_follows_the_input_unless_given():
    assert worker_count(None, None) == worker_count(None, PARALLEL_MIN_BYTES - 1) == 1
    assert worker_count(None, PARALLEL_MIN_BYTES) >= 1
    assert worker_count(3, 10) == 3
    with pytest.raises(ValueError, match="workers must be at least 1, got 0"):
        worker_count(0, None)


def test_workers_below_one_are_refused_before_anything_is_written(tmp_path, capsys):
    from lmlab.cli import main

    source = write_jsonl(tmp_path / "a.jsonl", corpus(0, 100))
    assert main(["prepare", source, "--out", str(tmp_path / "out" / "data"), "--workers",
                 "0"]) == 1
    assert capsys.readouterr().err.strip() == "lmlab: error: workers must be at least 1, got 0"
    assert not (tmp_path / "out").exists()
