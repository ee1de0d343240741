"""Atomic file writes: a reader sees the old file or the whole new one, never a part.

A write that cannot start (a read-only or full disk, a missing permission) is reported about the
path the user asked for, never the temporary name beside it that was being made. What was
written is checked later by its SHA-256 (`sha256_of`), read in blocks.
"""

from __future__ import annotations

import contextlib
import hashlib
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


def not_writable(path: str | Path, error: OSError) -> OSError:
    """`error`, met making `path` or a temporary name beside it, restated about `path`."""
    restated = OSError(f"{path} cannot be written: {error.strerror or error}")
    restated.errno = error.errno
    return restated


def make_directory(path: str | Path) -> None:
    """`path` with its missing parents; a failure names `path` and says why."""
    try:
        Path(path).mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise not_writable(path, error) from None


def staging_directory(path: Path, prefix: str | None = None) -> Path:
    """A new empty directory beside `path` to build it in (named `prefix`… or `.NAME.`…), with
    the permissions of an ordinary new directory; a failure names `path`."""
    try:
        staging = tempfile.mkdtemp(dir=path.parent, prefix=prefix or f".{path.name}.",
                                   suffix="" if prefix else ".tmp")
    except OSError as error:
        raise not_writable(path, error) from None
    os.chmod(staging, 0o777 & ~current_umask())
    return Path(staging)


@contextlib.contextmanager
def atomic_write(path: str | Path, mode: str = "w") -> Iterator[IO]:
    """Write through a temporary file beside `path`, made durable and renamed over `path` when
    the block ends; on an error it is removed and `path` is untouched."""
    path = Path(path)
    try:
        descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.",
                                                 suffix=".tmp")
    except OSError as error:
        raise not_writable(path, error) from None
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
    make_directory(path.parent)
    staging = staging_directory(path)
    try:
        yield staging
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


def sha256_of(path: str | Path) -> str:
    """The SHA-256 of the file at `path`, as hex."""
    return hash_file(hashlib.sha256(), path).hexdigest()


def hash_file(digest: hashlib._Hash, path: str | Path) -> hashlib._Hash:
    """`digest` updated with the bytes of the file at `path`, read 1 MiB at a time."""
    with open(path, "rb") as file:
        while block := file.read(1 << 20):
            digest.update(block)
    return digest
