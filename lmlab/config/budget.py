"""How long a run trains: steps, tokens ("20M", "chinchilla") or minutes, whichever ends first."""

from __future__ import annotations

import math
import time

SUFFIXES = {"k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}
CHINCHILLA_TOKENS_PER_PARAMETER = 20  # Hoffmann et al. 2022
DEFAULT_MINUTES = 5.0


def parse_count(text: str) -> int:
    """'20M' → 20_000_000; plain integers and scientific notation also accepted."""
    clean = text.strip().lower().replace("_", "")
    scale = SUFFIXES.get(clean[-1:], 1)
    try:
        return int(float(clean[:-1] if scale != 1 else clean) * scale)
    except ValueError:
        raise ValueError(f"cannot read {text!r} as a token count (try 20M or chinchilla)") from None


def format_count(count: float) -> str:
    """20_000_000 → '20M', 1_234 → '1.23k': three significant digits, readable by
    parse_count."""
    rounded = float(f"{count:.3g}")  # 999_999 is 1M, not 1e+03k
    for suffix, scale in sorted(SUFFIXES.items(), key=lambda item: -item[1]):
        if abs(rounded) >= scale:
            return f"{rounded / scale:.3g}{suffix.upper() if suffix != 'k' else suffix}"
    return f"{rounded:.3g}"


def step_budget(steps: int | None, tokens: str | None, parameters: int,
                tokens_per_step: int) -> int | None:
    """The steps allowed by the step and token budgets, or None when neither is set."""
    limits = [steps] if steps else []
    if tokens:
        count = (CHINCHILLA_TOKENS_PER_PARAMETER * parameters if tokens == "chinchilla"
                 else parse_count(tokens))
        limits.append(math.ceil(count / tokens_per_step))
    return min(limits) if limits else None


def steps_in_minutes(minutes: float, seconds_per_step: float) -> int:
    return max(1, int(minutes * 60 / seconds_per_step))


def minutes_budget(minutes: float | None, steps: int | None) -> float | None:
    """The time budget: the one given, or with no budget at all DEFAULT_MINUTES."""
    return minutes if minutes is not None else (None if steps else DEFAULT_MINUTES)


# Validations spread over a time budget, so that a short run plots a curve, each on about one
# micro-batch per hundred trained (at least one, at most --eval-batches): a forward pass
# costs a third of a training step, so the twelve take a few percent of the time. The mask
# of a validation is fixed, so one micro-batch gives a smooth curve.
DEADLINE_VALIDATIONS = 12
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
