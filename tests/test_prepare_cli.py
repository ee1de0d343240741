"""`lmlab prepare` on the command line: options reach the recipe, and every kind of bad input
is one line, a non-zero exit, no traceback and nothing left behind."""

import json

import numpy as np
import pytest
from tokenizers import Tokenizer, models

from lmlab.cli import main
from lmlab.data.tokenizer import SPECIAL_TOKENS

WORDS = "red green blue small large quick slow bright dark round".split()


def texts(count=200, seed=0):
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=8)).capitalize() + ".\n" +
            " ".join(rng.choice(WORDS, size=5)).capitalize() + "." for _ in range(count)]


def jsonl(path, documents, field="text"):
    path.write_text("".join(json.dumps({field: d}) + "\n" for d in documents))
    return str(path)


def run(capsys, *args):
    code = main(["prepare", *map(str, args)])
    return code, capsys.readouterr().err


def test_options_reach_the_recipe_and_the_dataset(tmp_path, capsys):
    source = jsonl(tmp_path / "c.jsonl", texts())
    code, err = run(capsys, source, "--out", tmp_path / "d", "--tokenizer", "unigram",
                    "--vocab-size", 300, "--sentinels", 3, "--no-near-dedup",
                    "--no-exact-dedup", "--normalisation", "NFKC", "--sentence-split", "lines",
                    "--validation-fraction", 0.3, "--keep-control-characters")
    assert code == 0, err
    meta = json.loads((tmp_path / "d" / "meta.json").read_text())
    recipe = meta["recipe"]
    assert (recipe["tokenizer"], recipe["vocab_size"], recipe["sentinels"]) == ("unigram", 300, 3)
    assert recipe["near_dedup_threshold"] is None and recipe["exact_dedup"] is False
    assert (recipe["normalisation"], recipe["sentence_split"]) == ("NFKC", "lines")
    assert recipe["strip_control"] is False and recipe["validation_fraction"] == 0.3
    splits = meta["splits"]
    # `lines`: each two-line document is exactly two sentences.
    assert all(s["sentences"] == 2 * s["documents"] for s in splits.values())


def test_a_bad_jsonl_line_is_skipped_and_counted_unless_strict(tmp_path, capsys):
    lines = [json.dumps({"text": t}) for t in texts()]
    lines.insert(2, "{oops")
    (tmp_path / "c.jsonl").write_text("\n".join(lines) + "\n")
    code, err = run(capsys, tmp_path / "c.jsonl", "--out", tmp_path / "d", "--vocab-size", 300)
    assert code == 0, err
    meta = json.loads((tmp_path / "d" / "meta.json").read_text())
    assert meta["reading"]["skipped"] == {"not_json": 1}
    code, err = run(capsys, tmp_path / "c.jsonl", "--out", tmp_path / "strict", "--strict")
    assert code == 1 and err.strip().endswith("c.jsonl:3: not valid JSON")
    assert not (tmp_path / "strict").exists()


def tokenizer_without_mask(path):
    vocab = {t: i for i, t in enumerate([s for s in SPECIAL_TOKENS if s != "[MASK]"] + ["a"])}
    Tokenizer(models.WordLevel(vocab, unk_token="[UNK]")).save(str(path))
    return path


def occupied(path):
    path.mkdir()
    (path / "notes.txt").write_text("mine")
    return path


BAD_INPUTS = {
    "missing path": (lambda p: ["missing.jsonl"], "missing.jsonl: no such file or directory"),
    "empty corpus": (lambda p: [jsonl(p / "empty.jsonl", [])], "the corpus is empty"),
    "empty after cleaning": (lambda p: [jsonl(p / "blank.jsonl", [" ", "\t\n"])],
                             "no documents left after cleaning"),
    "empty after filtering": (lambda p: [jsonl(p / "c.jsonl", texts()), "--quality-filter"],
                              "no documents left after cleaning"),
    "binary file": (lambda p: [(p / "b.txt").write_bytes(b"\x00\x01\x02") and p / "b.txt"],
                    "b.txt: looks like a binary file"),
    "missing field": (lambda p: [jsonl(p / "f.jsonl", texts(), field="body")],
                      "f.jsonl:1: no 'text' field (fields: body)"),
    "missing column": (lambda p: [(p / "c.csv").write_text("id,body\n1,hello\n") and
                                  p / "c.csv"], "c.csv:1: no 'text' column (columns: id, body)"),
    "tokenizer lacking specials": (
        lambda p: [jsonl(p / "c.jsonl", texts()), "--tokenizer",
                   tokenizer_without_mask(p / "t.json")],
        "t.json lacks the special tokens [MASK]"),
    "vocabulary too large": (lambda p: [jsonl(p / "c.jsonl", texts()), "--vocab-size",
                                        2**32 + 1],
                             "vocabulary of 4294967297 ids does not fit in uint32"),
    "unknown recipe field": (lambda p: [jsonl(p / "c.jsonl", texts()), "--recipe",
                                        (p / "r.toml").write_text("vocab = 5") and p / "r.toml"],
                             "unknown field in"),
}


@pytest.mark.parametrize("case", BAD_INPUTS)
def test_bad_input_is_one_line_and_leaves_nothing(tmp_path, capsys, monkeypatch, case):
    monkeypatch.chdir(tmp_path)
    make, message = BAD_INPUTS[case]
    code, err = run(capsys, *make(tmp_path), "--out", tmp_path / "d")
    assert code == 1
    assert err.strip().splitlines()[-1].startswith("lmlab: error: ")
    assert message in err.strip().splitlines()[-1] and "Traceback" not in err, err
    assert not (tmp_path / "d").exists()
    assert not [p for p in tmp_path.iterdir() if ".partial-" in p.name]


def test_an_output_directory_holding_something_else_is_refused(tmp_path, capsys):
    source = jsonl(tmp_path / "c.jsonl", texts())
    code, err = run(capsys, source, "--out", occupied(tmp_path / "d"))
    assert code == 1 and "d holds something that is not an lmlab dataset" in err
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["notes.txt"]
