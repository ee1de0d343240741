"""Warm-ups of what a pre-training step reads: the rows start short and grow to --seq-len
over --seq-len-warmup-steps, and a step reads a share of its batch that grows to all of it over
--batch-size-warmup-steps. Each micro-batch's block comes as the data gives it, so the data
order, and a resumed run, are as without a warm-up; validation reads whole rows."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from lmlab.config.training import WARMUP_START_DIVISOR


def pieces_per_row(step: int, warmup_steps: int) -> int:
    """Into how many pieces a row is cut at `step` (0-based): the fewest (4, 3, 2 or 1) whose
    length, a whole fraction of the row, is at most a straight line from a quarter of the row
    at step 0 to the whole row at `warmup_steps`."""
    if step >= warmup_steps:
        return 1
    # ceil(4 / (1 + 3·step/warmup_steps)) in integers, exact at the line's crossings
    return -(-WARMUP_START_DIVISOR * warmup_steps
             // (warmup_steps + (WARMUP_START_DIVISOR - 1) * step))


def rows_read(step: int, warmup_steps: int, rows: int) -> int:
    """How many of a micro-batch's `rows` the step at `step` reads: a straight line from a
    quarter of them (at least one) at step 0 to all of them at `warmup_steps`, rounded down."""
    if step >= warmup_steps:
        return rows
    share = warmup_steps + (WARMUP_START_DIVISOR - 1) * step  # of WARMUP_START_DIVISOR·N
    return max(1, rows * share // (WARMUP_START_DIVISOR * warmup_steps))


@dataclass(frozen=True)
class GrowingRows:
    """What a step reads of each (B, L) block: with a batch-size warm-up its first
    `rows_read` rows (the others skipped, not read later); with a sequence-length warm-up each
    row cut into `pieces_per_row` pieces of L // k tokens, the few left over at a row's end
    unread, so that the rows' tokens stay about the same (B·k shorter rows)."""

    seq_len_warmup_steps: int = 0
    batch_size_warmup_steps: int = 0

    def of(self, tokens: Tensor, step: int) -> Tensor:
        rows = rows_read(step, self.batch_size_warmup_steps, len(tokens))
        pieces = pieces_per_row(step, self.seq_len_warmup_steps)
        if rows == len(tokens) and pieces == 1:
            return tokens
        length = tokens.shape[1] // pieces
        # (b, k·ℓ) → (b·k, ℓ): each row's pieces side by side, in order
        return tokens[:rows, :pieces * length].reshape(-1, length)


WHOLE_ROWS = GrowingRows()  # no warm-up: every block read as it came
