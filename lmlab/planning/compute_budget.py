"""The compute a plan sizes a run for: training minutes on this machine, FLOPs, or tokens;
exactly one (a run's own stopping budget is lmlab.config.budget's Budget)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from lmlab.config.budget import parse_count


@dataclass(frozen=True)
class ComputeBudget:
    kind: Literal["minutes", "flops", "tokens"]
    amount: float

    @classmethod
    def read(cls, minutes: float | None, flops: float | str | None,
             tokens: int | str | None) -> ComputeBudget:
        """Exactly one of the three; tokens may be written 20M, FLOPs 1e18."""
        given = {kind: value for kind, value in
                 (("minutes", minutes), ("flops", flops), ("tokens", tokens)) if value is not None}
        if len(given) != 1:
            named = " and ".join(f"--{kind}" for kind in given) or "none"
            raise ValueError(f"give exactly one budget (--minutes, --flops or --tokens), got "
                             f"{named}")
        ((kind, value),) = given.items()
        if kind == "tokens" and str(value).strip().lower() == "chinchilla":
            raise ValueError("a plan needs --tokens as a count such as 20M; the compute-optimal "
                             "tokens are what it works out")
        if kind == "tokens":
            amount = float(parse_count(str(value)))
        else:
            try:
                amount = float(value)
            except ValueError:
                raise ValueError(f"--{kind} {value!r} is not a number") from None
        if not amount > 0:
            raise ValueError(f"--{kind} must be positive, got {value}")
        return cls(kind, amount)
