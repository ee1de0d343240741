"""Atomic file writes: a reader sees the old file or the whole new one, never a part.

A write that cannot start (a read-only or full disk, a missing permission) is reported about the
path the user asked for, never the temporary name beside it that was being made; so is one that
fails on the way (a disk that fills), with what it left: nothing, or the old file. What was
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


class WriteFailed(OSError):
    """A write that failed on the way, said about the path the user asked for and what is left
    of it; `errno` and `strerror` are those of the failure."""

    def __init__(self, path: Path, cause: OSError, existed: bool):
        reason = cause.strerror or str(cause)
        super().__init__(cause.errno, reason)
        left = f"{path} is as it was" if existed else "nothing was written"
        self.message = f"{reason[:1].lower()}{reason[1:]} while writing {path}; {left}"

    def __str__(self) -> str:
        return self.message


def os_error_behind(error: BaseException | None) -> OSError | None:
    """The OSError that `error` is or was raised while handling: torch.save reports a failed
    write as a RuntimeError whose context is the OSError."""
    while error is not None and not isinstance(error, OSError):
        error = error.__cause__ or error.__context__
    return error


@contextlib.contextmanager
def failed_writes_named(path: Path) -> Iterator[None]:
    """Restate a write that fails in the block as a WriteFailed about `path`. A failed write
    call names no file (ENOSPC, EDQUOT); an OSError that names one (a file that could not be
    read), or that has no errno (a library's own), passes unchanged."""
    existed = path.exists()
    try:
        yield
    except Exception as error:
        cause = os_error_behind(error)
        if cause is None or cause.filename is not None or cause.errno is None:
            raise
        raise WriteFailed(path, cause, existed) from None


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
    with failed_writes_named(path):
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
    with failed_writes_named(path):
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
