"""A disk that fills while a command writes: each writing command says so in one line, naming
its output and what is left of it, and leaves no temporary behind and nothing half-written."""

import builtins
import errno
import io
import os
import shutil
from pathlib import Path

import pytest

import lmlab
from lmlab.cli import main
from tests.hf_runs import finetuned_run, pretrained_run


class Disk:
    """Room left on a disk, in bytes, shared by the files written to it."""

    def __init__(self, room: int):
        self.room = room


def full_file(disk: Disk) -> type[io.FileIO]:
    class FullFile(io.FileIO):
        """A file on `disk`: a write that does not fit fails, as on a full disk."""

        def write(self, data) -> int:
            if len(data) > disk.room:
                raise OSError(errno.ENOSPC, "No space left on device")
            disk.room -= len(data)
            return super().write(data)

    return FullFile


@pytest.fixture
def full_disk(monkeypatch):
    """`fill(folder, room)`: from now on, files opened for writing under `folder` hold `room`
    more bytes in all; a write past that fails with ENOSPC (opening files and making folders
    still work, as they do on a full disk)."""
    real_open = io.open

    def fill(folder: Path, room: int = 0) -> None:
        raw_file = full_file(Disk(room))

        def opened(file, mode="r", buffering=-1, encoding=None, errors=None, newline=None,
                   closefd=True, opener=None):
            where = Path(os.readlink(f"/proc/self/fd/{file}") if isinstance(file, int)
                         else os.fspath(file)).resolve()
            if set(mode).isdisjoint("wax+") or folder.resolve() not in where.parents:
                return real_open(file, mode, buffering, encoding, errors, newline, closefd,
                                 opener)
            buffered = io.BufferedWriter(raw_file(file, mode.replace("b", "").replace("t", ""),
                                                  closefd, opener))
            return buffered if "b" in mode else io.TextIOWrapper(
                buffered, encoding or "utf-8", errors, newline)

        monkeypatch.setattr(io, "open", opened)
        monkeypatch.setattr(builtins, "open", opened)

    return fill


@pytest.fixture(scope="module")
def place(tmp_path_factory) -> Path:
    """Tiny runs, an exported model to import, a data set and text files; `disk` is the folder
    each test fills."""
    root = tmp_path_factory.mktemp("full-disk")
    pretrained_run(root / "mlm", "bert", "mlm")
    pretrained_run(root / "clm", "gpt2", "clm")
    finetuned_run(root / "classifier", "classify", labels=["neg", "pos"])
    assert main(["export", str(root / "mlm"), "--out", str(root / "hf"), "--no-check"]) == 0
    (root / "train.tsv").write_text("label\tsentence\n" + "pos\tthe cat sat\nneg\ta dog ran\n" * 8)
    (root / "text.txt").write_text("the quick brown fox jumps over the lazy dog.\n" * 4)
    corpus = root / "corpus.jsonl"
    corpus.write_text("".join(f'{{"text": "the cat sat on mat number {i}."}}\n'
                              for i in range(200)))
    lmlab.prepare([str(corpus)], root / "data", vocab_size=200, validation_fraction=0.1)
    return root


@pytest.fixture
def disk(place, full_disk) -> Path:
    folder = place / "disk"
    folder.mkdir()
    yield folder
    shutil.rmtree(folder)


def refused(capsys, *args) -> str:
    """The one line a command that failed ended with."""
    capsys.readouterr()
    code = main([str(a) for a in args])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err, err
    *_, last = err.strip().splitlines()
    assert last.startswith("lmlab: error: "), err
    return last.removeprefix("lmlab: error: ")


def no_files(folder: Path) -> None:
    """Nothing written is left under `folder`: no temporary, no part of an output."""
    assert [p for p in folder.rglob("*") if not p.is_dir()] == []


def full(path: Path, left: str = "nothing was written") -> str:
    return f"no space left on device while writing {path}; {left}"


def test_export_to_a_full_disk_leaves_nothing_or_the_earlier_export(place, disk, full_disk,
                                                                    capsys):
    earlier = disk / "hf"
    assert main(["export", str(place / "mlm"), "--out", str(earlier), "--no-check"]) == 0
    before = {p: p.read_bytes() for p in earlier.iterdir()}
    full_disk(disk)
    assert refused(capsys, "export", place / "mlm", "--out", earlier, "--no-check") == full(
        earlier.resolve(), f"{earlier.resolve()} is as it was")
    assert {p: p.read_bytes() for p in earlier.iterdir()} == before
    shutil.rmtree(earlier)
    assert refused(capsys, "export", place / "mlm", "--out", disk / "new", "--no-check") == full(
        (disk / "new").resolve())
    gguf = disk / "model.gguf"  # the one-file format, written as the file itself
    assert refused(capsys, "export", place / "clm", "--format", "gguf", "--out", gguf,
                   "--no-check") == full(gguf.resolve())
    no_files(disk)


def test_import_to_a_full_disk_leaves_nothing(place, disk, full_disk, capsys):
    full_disk(disk)
    out = disk / "imported"
    assert refused(capsys, "import", place / "hf", "--out", out) == full(out.resolve())
    assert not out.exists()
    no_files(disk)


def test_embed_to_a_full_disk_leaves_nothing(place, disk, full_disk, capsys):
    full_disk(disk)
    out = disk / "vectors.npy"
    assert refused(capsys, "embed", place / "mlm", "a cat sat.", "--out", out) == full(out)
    no_files(disk)


def test_eval_to_a_full_disk_leaves_nothing(place, disk, full_disk, capsys):
    full_disk(disk)
    out = disk / "results.json"
    assert refused(capsys, "eval", place / "mlm", "--data", place / "text.txt", "--out",
                   out) == full(out)
    no_files(disk)


def test_plan_to_a_full_disk_leaves_nothing(place, disk, full_disk, capsys):
    full_disk(disk)
    out = disk / "plan.json"
    assert refused(capsys, "plan", "--objective", "clm", "--tokens", "1M", "--data",
                   place / "data", "--sizes", "tiny", "--seq-len", "16", "--batch-size", "2",
                   "--steps-to-time", "1", "--out", out) == full(out)
    no_files(disk)


def test_finetune_on_a_full_disk_leaves_no_half_made_run(place, disk, full_disk, capsys):
    out = disk / "sentiment"
    tokenizer = (place / "mlm" / "tokenizer.json").stat().st_size
    full_disk(disk, room=tokenizer)  # the run's tokenizer fits, its config.json does not
    assert refused(capsys, "finetune", place / "mlm", "--task", "classify", "--train",
                   place / "train.tsv", "--validation", place / "train.tsv", "--steps", "1",
                   "--out", out) == full(out / "config.json")
    assert not out.exists()  # a tokenizer without a config would be refused as no run
    no_files(disk)


def test_distill_on_a_full_disk_leaves_no_half_made_run(place, disk, full_disk, capsys):
    full_disk(disk)
    out = disk / "student"
    assert refused(capsys, "distill", place / "classifier", "--layers", "1", "--train",
                   place / "train.tsv", "--validation", place / "train.tsv", "--steps", "1",
                   "--out", out) == full(out / "tokenizer.json")
    assert not out.exists()
    no_files(disk)


def test_compare_on_a_full_disk_leaves_nothing(place, disk, full_disk, capsys):
    full_disk(disk)
    out = disk / "lab"
    assert refused(capsys, "compare", "--objectives", "mlm,clm", "--budget", "10", "--match",
                   "steps", "--data", place / "data", "--out", out) == full(out / "design.json")
    no_files(disk)
