"""lmlab's cache directory ($LMLAB_CACHE_DIR, else ~/.cache/lmlab): the built-in corpus, the
peak-FLOP probes, and the locks that let processes started together share work."""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path


def cache_dir() -> Path:
    return Path(os.environ.get("LMLAB_CACHE_DIR", Path.home() / ".cache" / "lmlab"))


@contextlib.contextmanager
def only_one_process(work: Path, waiting: str) -> Iterator[None]:
    """Hold the lock on `work` (a directory being made) for the block: a second process
    prints `waiting` and waits. The lock file lives in the cache, not beside `work`."""
    from filelock import FileLock, Timeout

    key = hashlib.sha256(str(work.resolve()).encode()).hexdigest()[:24]
    locks = cache_dir() / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    lock = FileLock(locks / f"{key}.lock")
    try:
        lock.acquire(timeout=0)
    except Timeout:
        print(waiting, flush=True)
        lock.acquire()
    try:
        yield
    finally:
        lock.release()
