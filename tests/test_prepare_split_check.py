"""A corpus too few documents to split fails as soon as it has been read: one clear line that
says why (documents go to a split whole) and what to do, before a tokenizer is trained or a
token encoded, with nothing left behind."""

from __future__ import annotations

import random

import pytest

import lmlab.data.preparation.builtin as preparation
from lmlab.cli import main

WORDS = "the a quick slow brown fox dog cat jumps runs over under lazy old river bank".split()


def never(*args, **kwargs):
    raise AssertionError("the tokenizer was trained on a corpus that cannot be split")


@pytest.mark.parametrize("blank_lines", [False, True])
def test_one_long_line_fails_after_reading_and_suggests_blank_line_documents(
        tmp_path, capsys, monkeypatch, blank_lines):
    monkeypatch.setattr(preparation, "train_on", never)
    corpus = tmp_path / "one.txt"
    corpus.write_text(" ".join(WORDS[i % len(WORDS)] for i in range(40_000)) + "\n")
    size = corpus.stat().st_size
    capsys.readouterr()
    args = ["prepare", str(corpus), "--out", str(tmp_path / "data")]
    assert main(args + ["--blank-line-documents"] * blank_lines) == 1
    err = capsys.readouterr().err.split("\r")[-1].strip()  # after the progress bar
    assert err.splitlines() == [err]
    advice = ("give --blank-line-documents if blank lines separate its documents; or "
              * (not blank_lines))
    assert err == (
        "lmlab: error: no document fell in the validation split: documents are split whole, "
        "and the corpus came to 1 document after cleaning (the longest "
        f"{size / 1e6:.1f} MB) at validation fraction 0.05; {advice}split long documents into "
        "several (blank lines between them in a .txt file, or one JSON line each); or change "
        "--validation-fraction")
    assert not (tmp_path / "data").exists()


def test_paragraphs_as_documents_prepare(tmp_path, capsys):
    corpus = tmp_path / "paragraphs.txt"
    rng = random.Random(0)
    corpus.write_text("\n\n".join(" ".join(rng.choices(WORDS, k=30)) for _ in range(200)))
    assert main(["prepare", str(corpus), "--out", str(tmp_path / "one"), "--vocab-size",
                 "300"]) == 1  # the whole file is one document
    assert main(["prepare", str(corpus), "--out", str(tmp_path / "data"), "--vocab-size",
                 "300", "--blank-line-documents"]) == 0
