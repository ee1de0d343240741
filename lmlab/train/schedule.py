"""Learning-rate schedules as pure functions of the step: multiplier in [0, 1] of the peak."""

from __future__ import annotations

import math
from dataclasses import dataclass

from lmlab.config.training import ScheduleName


@dataclass(frozen=True)
class Schedule:
    """After `held_steps` at `held_level` (a head warm-up: new heads learn alone, at the rate
    new weights learn at, while the body waits; lmlab/train/head_warmup.py), a linear warmup
    over `warmup_steps`, then:

    cosine    half-cosine from 1 down to `floor` at `total_steps` (default)
    linear    straight line from 1 down to `floor`
    constant  1 throughout
    wsd       warmup-stable-decay (Hu et al. 2024): 1 until the last `decay_fraction` of
              training, then linear down to `floor`
    """

    name: ScheduleName = "cosine"
    total_steps: int = 1000
    warmup_steps: int = 0
    floor: float = 0.1
    decay_fraction: float = 0.2
    held_steps: int = 0
    held_level: float = 1.0

    def __post_init__(self) -> None:
        if self.name not in ("cosine", "linear", "constant", "wsd"):
            raise ValueError(f"unknown schedule {self.name!r}; choose cosine, linear, "
                             "constant or wsd")
        if not 0 <= self.warmup_steps <= self.total_steps:
            raise ValueError("warmup_steps must lie between 0 and total_steps")
        if self.held_steps < 0 or self.held_level < 0:
            raise ValueError(f"held_steps and held_level must be 0 or more, got "
                             f"{self.held_steps} and {self.held_level}")
        if not 0.0 <= self.floor <= 1.0:
            raise ValueError(f"floor must be a fraction of the peak in [0, 1], got {self.floor}")

    def __call__(self, step: int) -> float:
        """Multiplier for the update made at `step` (0-based) (of the peak; during the held
        steps it may exceed 1)."""
        if step < self.held_steps:
            return self.held_level
        step, total_steps = step - self.held_steps, max(1, self.total_steps - self.held_steps)
        warmup_steps = min(self.warmup_steps, total_steps)
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        if self.name == "constant":
            return 1.0
        decay_start = warmup_steps
        if self.name == "wsd":
            decay_start = max(warmup_steps, round(total_steps * (1 - self.decay_fraction)))
        if step < decay_start:
            return 1.0
        progress = min(1.0, (step - decay_start) / max(1, total_steps - decay_start))
        if self.name == "cosine":
            shape = 0.5 * (1 + math.cos(math.pi * progress))
        else:
            shape = 1 - progress
        return self.floor + (1 - self.floor) * shape
