"""Commands started together on one machine: two pre-training runs and a prepare of the
built-in corpus at the same moment all finish, one process preparing while the others wait;
and what lmlab writes gets the user's umask, not a temporary file's private 0600/0700."""

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from lmlab.config.training import TrainConfig
from lmlab.data.preparation import prepare
from lmlab.train import entry as pretraining
from tests.synthetic_run import synthetic_dataset


def start(*args, cwd: Path, cache: Path) -> subprocess.Popen:
    env = {**os.environ, "LMLAB_CACHE_DIR": str(cache)}
    return subprocess.Popen([sys.executable, "-m", "lmlab", *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_two_runs_and_a_prepare_of_the_builtin_corpus_at_once(tmp_path):
    cache = tmp_path / "cache"
    train = ("pretrain", "--steps", "1", "--batch-size", "2", "--model", "gpt2-tiny",
             "--seq-len", "16")
    processes = [start(*train, "--objective", "clm", cwd=tmp_path, cache=cache),
                 start(*train, "--objective", "mlm", "--model", "bert-tiny", cwd=tmp_path,
                       cache=cache),
                 start("prepare", "--out", str(cache / "mine"), cwd=tmp_path, cache=cache)]
    for process in processes:
        out, err = process.communicate(timeout=600)
        assert process.returncode == 0, err[-2000:]
    datasets = cache / "datasets"
    assert [p.name for p in datasets.iterdir() if ".partial-" in p.name] == []
    assert all((tmp_path / "runs" / name / "checkpoints").is_dir() for name in ("clm", "mlm"))


def modes(root: Path) -> set[tuple[str, int]]:
    """(kind, permission bits) of everything under `root`, `root` included."""
    found = set()
    for path in [root, *root.rglob("*")]:
        if not path.name.endswith(".lock"):
            found.add(("dir" if path.is_dir() else "file", stat.S_IMODE(path.stat().st_mode)))
    return found


def test_datasets_and_runs_get_the_users_umask(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"Line {i} says {i * 7919:x}.\n\n" for i in range(200)))
    previous = os.umask(0o027)
    try:
        dataset = prepare([str(corpus)], tmp_path / "data", vocab_size=300,
                          blank_line_documents=True)
        run = pretraining.pretrain(TrainConfig(
            objective="clm", model="gpt2-tiny", seq_len=16, batch_size=2, steps=2,
            checkpoint_every=1, out=str(tmp_path / "run")), synthetic_dataset()[1])
    finally:
        os.umask(previous)
    assert modes(Path(dataset)) == {("dir", 0o750), ("file", 0o640)}
    assert modes(run) == {("dir", 0o750), ("file", 0o640)}
