"""Atomic file writes: a reader sees the old file or the whole new one, never a part."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO


def current_umask() -> int:
    """The process's umask, which mkstemp and mkdtemp ignore (0600, 0700): what they make is
    chmod-ed to what an ordinary new file or directory would get."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_write(path: str | Path, mode: str = "w") -> Iterator[IO]:
    """Write through a temporary file beside `path`, made durable and renamed over `path` when
    the block ends; on an error it is removed and `path` is untouched."""
    path = Path(path)
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.",
                                             suffix=".tmp")
    try:
        with os.fdopen(descriptor, mode) as file:
            yield file
            file.flush()
            os.fsync(file.fileno())
        os.chmod(temporary, 0o666 & ~current_umask())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


def write_text_atomic(path: str | Path, text: str) -> None:
    with atomic_write(path) as file:
        file.write(text)


@contextlib.contextmanager
def atomic_directory(path: str | Path) -> Iterator[Path]:
    """A staging directory beside `path`, renamed to `path` (replacing what was there) when the
    block ends; on an error it is removed and `path` is untouched."""
    path = Path(path).resolve()  # a link to the directory: replace what it points to
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"))
    try:
        yield staging
        os.chmod(staging, 0o777 & ~current_umask())
        if path.exists():
            retired = staging.with_name(staging.name + ".old")
            os.replace(path, retired)
            os.replace(staging, path)
            shutil.rmtree(retired)
        else:
            os.replace(staging, path)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def check_replaceable(path: Path, ours: bool, kind: str) -> None:
    """Refuse to let `atomic_directory` replace `path` unless it is new, empty, or (`ours`)
    an earlier output of the same `kind`: a directory of the user's is never overwritten."""
    if path.exists() and not path.is_dir():
        raise ValueError(f"{path} exists and is not a directory")
    if path.is_dir() and any(path.iterdir()) and not ours:
        raise ValueError(f"{path} holds files that are not {kind}; choose another --out")
