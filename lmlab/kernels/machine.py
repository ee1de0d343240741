"""The machine lmlab runs on, and its process-wide tuning: what the CPU is (read once from
/proc/cpuinfo on Linux; elsewhere, what the platform module knows), how malloc keeps freed
memory for a training loop, and how many threads inference uses."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import platform
import sys
from collections.abc import Iterator
from pathlib import Path


@functools.cache
def _cpuinfo() -> dict[str, str]:
    """The first processor's fields."""
    fields: dict[str, str] = {}
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return fields
    for line in text.splitlines():
        if not line.strip():
            break
        name, _, value = line.partition(":")
        fields[name.strip()] = value.strip()
    return fields


def cpu_name() -> str:
    return _cpuinfo().get("model name") or platform.processor() or platform.machine()


def cpu_vendor() -> str:
    """'GenuineIntel', 'AuthenticAMD', ... or '' where unknown."""
    return _cpuinfo().get("vendor_id", "")


# mallopt parameters, from glibc's malloc.h
M_TRIM_THRESHOLD = -1
M_TOP_PAD = -2
M_MMAP_MAX = -4


def keep_freed_memory() -> bool:
    """Tune glibc malloc for a training loop; returns whether it was done.

    By default glibc serves large blocks (above 128 KiB, adaptively up to 32 MiB) with mmap
    and unmaps them on free, so every step faults its activation and gradient buffers in
    afresh: the CPU time spent in the kernel was 15-20% of a causal-LM step in our
    measurements. With mmap off and a high trim threshold, freed blocks go back to malloc's
    heap and the next step reuses them, as a GPU caching allocator would. Peak memory can grow
    somewhat with fragmentation. LMLAB_MALLOC_TUNE=0 leaves malloc alone.
    """
    if not sys.platform.startswith("linux") or os.environ.get("LMLAB_MALLOC_TUNE") == "0":
        return False
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):  # not glibc (musl, or a custom allocator preloaded)
        return False
    return all(mallopt(param, value) == 1 for param, value in (
        (M_MMAP_MAX, 0),  # large blocks from the heap, not mmap
        (M_TRIM_THRESHOLD, 1 << 30),  # keep up to 1 GiB of free heap top
        (M_TOP_PAD, 64 << 20),  # and grow the heap in 64 MiB strides
    ))


# Rows per forward pass that one thread handles best. A forward pass over a few rows (decoding
# one prompt, filling a few masks) is too small to split: on a busy machine its threads wait
# on each other far longer than they compute (one thread decoded 50 times faster than two on
# two loaded cores). Larger batches keep every core.
FEW_ROWS = 4


@contextlib.contextmanager
def threads_for(rows: int, requested: int | None = None) -> Iterator[None]:
    """Run the block with `requested` threads, or else one thread for `rows` <= FEW_ROWS;
    OMP_NUM_THREADS set in the environment is left as the user chose it."""
    import torch  # here: reading the CPU's name needs no torch

    if requested is not None and requested < 1:
        raise ValueError(f"--threads must be at least 1, got {requested}")
    chosen = requested
    if chosen is None and "OMP_NUM_THREADS" not in os.environ and rows <= FEW_ROWS:
        chosen = 1
    before = torch.get_num_threads()
    if chosen is not None:
        torch.set_num_threads(chosen)
    try:
        yield
    finally:
        torch.set_num_threads(before)
