"""lmlab prepare --engine datatrove is quiet by default: one line a stage (and progress bars),
datatrove's own log lines in the work folder; --verbose shows them as well."""

from __future__ import annotations

import json
import random

import pytest

from lmlab.cli import main

pytest.importorskip("datatrove")
WORDS = "the a quick slow brown fox dog cat jumps runs over under lazy old river bank".split()
LOGURU = "| INFO     |"  # the mark of a datatrove log line


@pytest.mark.slow
def test_a_run_is_one_line_a_stage(tmp_path, capfd):
    rng = random.Random(0)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"text": " ".join(rng.choices(WORDS, k=20))}) + "\n"
                              for _ in range(400)))
    assert main(["prepare", str(corpus), "--out", str(tmp_path / "data"), "--engine",
                 "datatrove", "--tasks", "2", "--vocab-size", "300"]) == 0
    out, err = capfd.readouterr()
    lines = out.splitlines()
    stages = [line for line in lines if line.startswith("stage ")]
    assert len(stages) == 8 and stages[-1] == "stage 8/8: encode (2 tasks)"
    assert lines[-1].startswith("dataset ready in ")
    assert LOGURU not in out + err and "PIPELINE" not in out + err
    # what is left on stderr are progress bars (tqdm's, with their elapsed time)
    assert all("[00:" in line for line in err.splitlines() if line.strip()), err


@pytest.mark.slow
def test_verbose_shows_datatrove_s_own_output(tmp_path, capfd):
    # one task, run in this process: a worker process started by an earlier test writes to
    # that test's captured stderr
    corpus = tmp_path / "bad.jsonl"
    corpus.write_text(json.dumps({"text": "one"}) + "\nnot json\n")
    assert main(["prepare", str(corpus), "--out", str(tmp_path / "data"), "--engine",
                 "datatrove", "--tasks", "1", "--strict", "--verbose"]) == 1
    err = capfd.readouterr().err
    assert "PIPELINE" in err and "Traceback" in err
    assert err.strip().splitlines()[-1] == f"lmlab: error: {corpus}:2: not valid JSON"


def test_verbose_belongs_to_the_datatrove_engine(tmp_path, capsys):
    assert main(["prepare", str(tmp_path / "x.txt"), "--out", str(tmp_path / "data"),
                 "--verbose"]) == 1
    assert capsys.readouterr().err == ("lmlab: error: --verbose shows datatrove's own output: "
                                       "give --engine datatrove\n")
