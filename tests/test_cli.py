"""The command line as a user meets it: the main job, prepare, and one-line errors."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from lmlab.runs.metrics import read_metrics

# Every test starts `python -m lmlab` afresh (seconds of imports each), and several train.
pytestmark = pytest.mark.slow


def lmlab(*args, cwd, cache):
    env = {**os.environ, "LMLAB_CACHE_DIR": str(cache)}
    return subprocess.run([sys.executable, "-m", "lmlab", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """One prepared built-in corpus for the module's runs."""
    return tmp_path_factory.mktemp("cache")


def test_main_job_prepares_the_builtin_corpus_and_leaves_a_run(tmp_path, cache):
    done = lmlab("pretrain", "--objective", "clm", "--steps", "3", "--batch-size", "4",
                 "--model", "gpt2-tiny", cwd=tmp_path, cache=cache)
    assert done.returncode == 0, done.stderr[-2000:]
    run = tmp_path / "runs" / "clm"
    assert (run / "tokenizer.json").is_file() and (run / "curves.png").is_file()
    assert [r["step"] for r in read_metrics(run) if r["kind"] == "train"][-1] == 3
    assert (cache / "datasets" / "builtin-bpe-8192-v2" / "meta.json").is_file()


def test_prepare_reads_jsonl_and_text_sources(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(json.dumps({"body": f"document {i} says hello to the world "
                                                    f"number {i * 7}."}) for i in range(200)))
    (tmp_path / "notes.txt").write_text("First note here.\n\nSecond note there.\n")
    done = lmlab("prepare", str(corpus), str(tmp_path / "notes.txt"), "--out", "data",
                 "--text-field", "body", "--vocab-size", "400", "--blank-line-documents",
                 cwd=tmp_path, cache=tmp_path / "cache")
    assert done.returncode == 0, done.stderr[-2000:]
    meta = json.loads((tmp_path / "data" / "meta.json").read_text())
    assert meta["cleaning"]["documents_in"] == 202


@pytest.mark.parametrize("args,message", [
    (["pretrain", "--objective", "bert"], "unknown objective 'bert'"),
    (["pretrain", "--model", "bart-tiny"], "unknown preset 'bart-tiny'"),
    (["pretrain", "--stpes", "3"], "unknown option --stpes; did you mean --steps?"),
    (["pretrain", "--data", "nowhere"], "dataset directory nowhere does not exist"),
    (["pretrain", "--lr", "fast"], "lr takes a number, got 'fast'"),
    (["prepare", "missing.jsonl", "--out", "d"], "missing.jsonl: no such file"),
    (["prepare", "bad.jsonl", "--out", "d"], "bad.jsonl:2: not valid JSON"),
])
def test_bad_input_is_one_line_and_a_non_zero_exit(tmp_path, args, message):
    (tmp_path / "bad.jsonl").write_text('{"text": "fine"}\n{oops\n')
    done = lmlab(*args, cwd=tmp_path, cache=tmp_path / "cache")
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert message in last and "Traceback" not in done.stderr, done.stderr[-1500:]
    assert not (tmp_path / "d").exists()


def test_an_existing_run_needs_resume_or_overwrite(tmp_path, cache):
    first = lmlab("pretrain", "--objective", "clm", "--steps", "1", "--batch-size", "2",
                  "--model", "gpt2-tiny", cwd=tmp_path, cache=cache)
    assert first.returncode == 0, first.stderr[-2000:]
    second = lmlab("pretrain", "--objective", "clm", "--steps", "2", "--batch-size", "2",
                   "--model", "gpt2-tiny", cwd=tmp_path, cache=cache)
    assert second.returncode == 1
    assert "holds a run already; pass --resume to continue it or --overwrite" in second.stderr


def test_resuming_with_another_vocabulary_is_refused(tmp_path, cache):
    (tmp_path / "corpus.txt").write_text("".join(
        f"Line {i} of a small text corpus about {i * 7919:x} and {i * 104729:o}.\n\n"
        for i in range(300)))  # enough distinct pieces for either vocabulary
    train = ("pretrain", "--objective", "clm", "--steps", "1", "--batch-size", "2", "--model",
             "gpt2-tiny", "--data", "small")
    for vocabulary, resume in [("380", ()), ("420", ("--resume",))]:
        shutil.rmtree(tmp_path / "small", ignore_errors=True)  # the dataset prepared anew
        prepared = lmlab("prepare", "corpus.txt", "--out", "small", "--vocab-size", vocabulary,
                         "--blank-line-documents", cwd=tmp_path, cache=cache)
        assert prepared.returncode == 0, prepared.stderr[-2000:]
        resumed = lmlab(*train, *resume, cwd=tmp_path, cache=cache)
    assert resumed.returncode == 1 and "Traceback" not in resumed.stderr
    assert "vocab_size 380 → 420" in resumed.stderr and "another tokenizer" in resumed.stderr
