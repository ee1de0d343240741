"""How many CPU threads inference uses. A forward pass over a few rows (decoding one prompt,
filling a few masks) is too small to split: on a busy machine its threads wait on each other
far longer than they compute (one thread decoded 50 times faster than two on two loaded
cores). Larger batches keep every core."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

FEW_ROWS = 4  # rows per forward pass that one thread handles best


@contextlib.contextmanager
def threads_for(rows: int, requested: int | None = None) -> Iterator[None]:
    """Run the block with `requested` threads, or else one thread for `rows` <= FEW_ROWS;
    OMP_NUM_THREADS set in the environment is left as the user chose it."""
    import torch

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
