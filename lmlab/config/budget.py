"""How long a run trains: steps, tokens ("20M", "chinchilla") or minutes, whichever ends first,
read and checked as a config's fields are; the clock that keeps a time budget is the loop's
(lmlab/train/deadline.py)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

SUFFIXES = {"k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}
CHINCHILLA_TOKENS_PER_PARAMETER = 20  # Hoffmann et al. 2022
DEFAULT_MINUTES = 5.0
# Validations spread over a time budget unless --eval-every says otherwise (train/deadline.py).
DEADLINE_VALIDATIONS = 12


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
    limits = [steps] if steps is not None else []
    if tokens:
        count = (CHINCHILLA_TOKENS_PER_PARAMETER * parameters if tokens == "chinchilla"
                 else parse_count(tokens))
        limits.append(math.ceil(count / tokens_per_step))
    return min(limits) if limits else None


def steps_in_minutes(minutes: float, seconds_per_step: float) -> int:
    return max(1, int(minutes * 60 / seconds_per_step))


def minutes_budget(minutes: float | None, steps: int | None) -> float | None:
    """The time budget: the one given, or with no budget at all DEFAULT_MINUTES."""
    return minutes if minutes is not None else (None if steps is not None else DEFAULT_MINUTES)


@dataclass(frozen=True)
class Budget:
    """A run's budgets, as given: none, or any of steps, tokens and minutes (the first reached
    ends the run)."""

    steps: int | None = None
    tokens: str | None = None  # a count such as 20M, or chinchilla (20 × parameters)
    minutes: float | None = None

    def __post_init__(self) -> None:
        if self.steps is not None and self.steps < 0:
            raise ValueError(f"steps must be 0 or more, got {self.steps}")
        if self.minutes is not None and not (math.isfinite(self.minutes) and self.minutes > 0):
            raise ValueError(f"minutes must be a positive number, got {self.minutes}")
        if self.tokens is not None and self.tokens != "chinchilla":
            if parse_count(self.tokens) < 1:
                raise ValueError(f"tokens must be at least 1, got {self.tokens}")

    @classmethod
    def of(cls, settings: Mapping) -> Budget:
        """The budgets among `settings` (a config's fields by name, or config.json's)."""
        return cls(*(settings.get(name) for name in BUDGETS))

    def step_cap(self, parameters: int, tokens_per_step: int) -> int | None:
        """The steps the step and token budgets allow, or None when neither is set."""
        return step_budget(self.steps, self.tokens, parameters, tokens_per_step)

    def time_limit(self, step_cap: int | None) -> float | None:
        """The minutes the run may take: the time budget, or with no budget at all
        DEFAULT_MINUTES; None when a step or token budget alone decides."""
        return minutes_budget(self.minutes, step_cap)


BUDGETS = ("steps", "tokens", "minutes")  # Budget's fields, by their config names
