"""`lmlab prepare --engine datatrove`: on a corpus with planted exact and near duplicates it
keeps the documents the built-in path keeps, up to near-duplicates the two MinHash families
catch differently, and trains to the same loss; an interrupted prepare resumes without
redoing finished tasks; on a Ray cluster it makes the dataset local processes make; what only
the built-in engine does is refused in one line."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

from lmlab.data.errors import DataError
from lmlab.data.preparation import Engine, prepare
from tests.test_prepare_parallel import RECIPE, corpus, write_jsonl

ROOT = Path(__file__).resolve().parents[1]


def documents(dataset: Path) -> list[str]:
    """Every document's text, decoded, train split then validation."""
    meta = json.loads((dataset / "meta.json").read_text())
    tokenizer = Tokenizer.from_file(str(dataset / "tokenizer.json"))
    texts = []
    for split in ("train", "validation"):
        tokens = np.fromfile(dataset / f"{split}.tokens.bin", meta["splits"][split]["dtype"])
        for start, stop in np.load(dataset / f"{split}.documents.npy"):
            texts.append(tokenizer.decode(tokens[start: stop - 1].tolist()))
    return texts


def jaccard(a: str, b: str) -> float:
    def shingles(text):
        words = text.split()
        return {tuple(words[i: i + 5]) for i in range(len(words) - 4)}

    return len(shingles(a) & shingles(b)) / len(shingles(a) | shingles(b))


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    texts = corpus(0, 1500)
    return [write_jsonl(root / "a.jsonl", texts[:900]), write_jsonl(root / "b.jsonl", texts[900:])]


@pytest.fixture(scope="module")
def builtin(sources, tmp_path_factory):
    return prepare(sources, tmp_path_factory.mktemp("builtin") / "data", quality_filter=True,
                   **RECIPE)


@pytest.mark.slow
@pytest.mark.parametrize("tasks", [2, 3])  # a file per task; documents dealt across 3 tasks
def test_the_engine_keeps_the_documents_the_builtin_path_keeps(sources, builtin, tmp_path,
                                                               tasks):
    made = prepare(sources, tmp_path / "data", engine=Engine("local", tasks),
                   quality_filter=True, **RECIPE)
    ours, theirs = (json.loads((d / "meta.json").read_text()) for d in (builtin, made))
    assert theirs["engine"] == {"name": "datatrove", "version": theirs["engine"]["version"],
                                "executor": "local", "tasks": tasks}
    for count in ("documents_in", "empty", "exact_duplicates", "quality_rejected"):
        assert theirs["cleaning"][count] == ours["cleaning"][count], count
    assert theirs["cleaning"]["exact_duplicates"] == 40
    assert abs(theirs["cleaning"]["near_duplicates"] - ours["cleaning"]["near_duplicates"]) <= 5
    assert theirs["reading"] == ours["reading"]
    kept_here, kept_there = set(documents(builtin)), set(documents(made))
    # A document only one side kept is a near-duplicate of one the other side kept: the two
    # MinHash families (hash functions, 64- against 32-bit) miss different pairs, and of a
    # pair found datatrove keeps the copy its tasks saw first, not always the earlier one.
    assert len(kept_here ^ kept_there) <= 2 * ours["cleaning"]["near_duplicates"]
    for only, other in [(kept_here - kept_there, kept_there), (kept_there - kept_here, kept_here)]:
        for text in only:
            assert max(jaccard(text, kept) for kept in other) >= 0.8
    assert not (tmp_path / ".data.datatrove").exists()  # the work folder goes when done


@pytest.mark.slow
def test_it_trains_to_the_same_loss(sources, builtin, tmp_path):
    from lmlab.train.entry import pretrain_with_settings

    given = str(builtin / "tokenizer.json")
    made = prepare(sources, tmp_path / "data", engine=Engine("local", 2), tokenizer=given,
                   quality_filter=True, **RECIPE)
    again = prepare(sources, tmp_path / "builtin", tokenizer=given, quality_filter=True,
                    **RECIPE)
    losses = []
    for data in (again, made):
        run = pretrain_with_settings(None, dict(
            objective="clm", data=str(data), model="gpt2-tiny", seq_len=64, batch_size=16,
            steps=60, eval_every=60, lr=3e-3, out=str(tmp_path / f"run-{data.name}")))
        records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        losses.append([r for r in records if r["kind"] == "eval"][-1]["clm/clm_loss"])
    first, second = losses
    assert first < 0.8 * np.log(400)  # it learned
    assert abs(first - second) / first < 0.03, (first, second)


@pytest.mark.slow
def test_an_interrupted_prepare_resumes_without_redoing_finished_tasks(sources, builtin,
                                                                         tmp_path):
    given = str(builtin / "tokenizer.json")
    command = [sys.executable, "-m", "lmlab", "prepare", *sources, "--engine", "datatrove",
               "--tasks", "2", "--tokenizer", given, "--validation-fraction", "0.2",
               "--sentinels", "4", "--out"]
    work = tmp_path / ".cut.datatrove"
    process = subprocess.Popen([*command, str(tmp_path / "cut")], cwd=ROOT,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    finished_first = work / "logs" / "01" / "completions"
    deadline = time.monotonic() + 120
    while not (finished_first.is_dir() and len(list(finished_first.iterdir())) == 2):
        assert process.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    assert not (tmp_path / "cut").exists()
    resumed = subprocess.run([*command, str(tmp_path / "cut")], cwd=ROOT, capture_output=True,
                             text=True)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "stage 1/7: read and clean (2 tasks, 2 done before)" in resumed.stdout
    whole = subprocess.run([*command, str(tmp_path / "whole")], cwd=ROOT, capture_output=True,
                           text=True)
    assert whole.returncode == 0, whole.stderr[-2000:]
    for name in ("train.tokens.bin", "validation.tokens.bin", "train.documents.npy",
                 "validation.sentences.npy", "tokenizer.json"):
        assert (tmp_path / "cut" / name).read_bytes() == (tmp_path / "whole" / name).read_bytes()
    cut, whole = (json.loads((tmp_path / name / "meta.json").read_text())
                  for name in ("cut", "whole"))
    for record in ("reading", "cleaning", "splits", "stats"):  # counted once, not twice
        assert cut[record] == whole[record], record


@pytest.mark.slow
def test_a_bad_recipe_leaves_no_work_behind_and_its_fix_runs(sources, builtin, tmp_path):
    given = {"tokenizer": str(builtin / "tokenizer.json"), "sentinels": 4}
    with pytest.raises(DataError, match="no document fell in the validation split"):
        prepare(sources, tmp_path / "data", engine=Engine("local", 2),
                validation_fraction=1e-9, **given)
    assert not list(tmp_path.iterdir())
    assert prepare(sources, tmp_path / "data", engine=Engine("local", 2),
                   validation_fraction=0.2, **given).is_dir()


def test_what_only_the_builtin_engine_does_is_refused(sources, tmp_path):
    with pytest.raises(DataError, match="does not mix weighted sources"):
        prepare([f"{sources[0]}:0.5", f"{sources[1]}:0.5"], tmp_path / "mix",
                engine=Engine())
    with pytest.raises(DataError, match="reads files"):
        prepare(None, tmp_path / "builtin", engine=Engine())
    with pytest.raises(DataError, match="executor must be one of"):
        Engine("slurm")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("options, message", [
    (["--executor", "ray"], "--executor and --tasks choose where --engine datatrove runs"),
    (["--engine", "datatrove", "--workers", "2"], "--workers sizes the built-in engine"),
])
def test_engine_options_out_of_place_are_refused_in_one_line(sources, tmp_path, options,
                                                             message, capsys):
    from lmlab.cli import main

    assert main(["prepare", sources[0], "--out", str(tmp_path / "data"), *options]) == 1
    error = capsys.readouterr().err
    assert error.startswith(f"lmlab: error: {message}") and error.count("\n") == 1
    assert not (tmp_path / "data").exists()


@pytest.mark.slow
def test_the_ray_executor_makes_the_dataset_the_local_one_makes(sources, builtin, tmp_path,
                                                                ray_address):
    pytest.importorskip("ray")
    given = str(builtin / "tokenizer.json")
    command = [sys.executable, "-m", "lmlab", "prepare", *sources, "--engine", "datatrove",
               "--tasks", "2", "--tokenizer", given, "--validation-fraction", "0.2",
               "--sentinels", "4", "--out"]
    on_ray = subprocess.run([*command, str(tmp_path / "ray"), "--executor", "ray"], cwd=ROOT,
                            env={**os.environ, "RAY_ADDRESS": ray_address},
                            capture_output=True, text=True)
    assert on_ray.returncode == 0, on_ray.stderr[-3000:]
    local = prepare(sources, tmp_path / "local", engine=Engine("local", 2), tokenizer=given,
                    validation_fraction=0.2, sentinels=4)
    for name in ("train.tokens.bin", "validation.tokens.bin", "train.documents.npy",
                 "train.sentences.npy", "validation.documents.npy", "tokenizer.json"):
        assert (tmp_path / "ray" / name).read_bytes() == (local / name).read_bytes(), name
    meta = json.loads((tmp_path / "ray" / "meta.json").read_text())
    assert meta["engine"]["executor"] == "ray" and meta["engine"]["tasks"] == 2
    assert meta["cleaning"] == json.loads((local / "meta.json").read_text())["cleaning"]


@pytest.mark.parametrize("address, message", [
    (None, "--executor ray needs RAY_ADDRESS, the address of the cluster's head node"),
    ("127.0.0.1:1", "--executor ray: no Ray cluster answers at 127.0.0.1:1 (RAY_ADDRESS)"),
])
def test_no_ray_cluster_is_refused_in_one_line(sources, tmp_path, monkeypatch, capsys,
                                              address, message):
    pytest.importorskip("ray")
    from lmlab.cli import main

    if address is None:
        monkeypatch.delenv("RAY_ADDRESS", raising=False)
    else:
        monkeypatch.setenv("RAY_ADDRESS", address)
    assert main(["prepare", sources[0], "--out", str(tmp_path / "data"), "--engine",
                 "datatrove", "--executor", "ray"]) == 1
    error = capsys.readouterr().err
    assert error.startswith(f"lmlab: error: {message}") and error.count("\n") == 1
    assert not list(tmp_path.iterdir())
