"""Keeping a time budget: the step count re-estimated from the pace so far, and validations
spread over the time."""

from __future__ import annotations

import math
import time

# Validations spread over a time budget (DEADLINE_VALIDATIONS, lmlab/config/budget.py), so that
# a short run plots a curve, each on about one micro-batch per hundred trained (at least one, at
# most --eval-batches): a forward pass costs a third of a training step, so the twelve take a
# few percent of the time. The mask of a validation is fixed, so one micro-batch gives a smooth
# curve.
DEADLINE_LOG_POINTS = 50  # training-loss points in its curve
VALIDATION_SHARE_LIMIT = 5  # a validation waits at least this many times its own duration
MICRO_BATCHES_PER_EVAL_BATCH = 100


def deadline_eval_batches(total_micro_batches: int, asked: int) -> int:
    return min(asked, max(1, total_micro_batches // MICRO_BATCHES_PER_EVAL_BATCH))


class Deadline:
    """A time budget kept however the machine's speed changes: the step count is re-estimated
    after every step from the pace so far (validations included), leaving time for the final
    validation, and validations are spread evenly over the time."""

    def __init__(self, minutes: float, cap: int | None = None, validations: int = 0,
                 clock=time.perf_counter) -> None:
        self.seconds, self.cap, self.validations, self.clock = minutes * 60, cap, validations, clock
        self.start = self.last_validation = clock()
        self.validation_seconds = 0.0

    def total_steps(self, step: int) -> int:
        """The step count that ends on time at the pace of the `step` steps taken."""
        elapsed = self.clock() - self.start
        left = self.seconds - elapsed - self.validation_seconds
        total = step + max(0, math.floor(left * step / max(elapsed, 1e-9)))
        return total if self.cap is None else min(total, self.cap)

    def validation_due(self) -> bool:
        """Whether `validations` spread over the time call for one now; on a machine so slow
        that they would take more than a fifth of it, fewer."""
        interval = max(self.seconds / max(self.validations, 1),
                       VALIDATION_SHARE_LIMIT * self.validation_seconds)
        return bool(self.validations) and self.clock() - self.last_validation >= interval

    def validated(self, started: float) -> None:
        """A validation that began at `started` (a reading of the clock) has ended."""
        self.last_validation = self.clock()
        self.validation_seconds = self.last_validation - started
