"""Timing a plan's candidate sizes within a small share of the budget it plans.

Each size is first probed: one training step of a single row, whose time times the batch's rows
estimates a step (high, as one row uses a machine less well than many; the probe costs about
one step's share of a row). A size is left untimed where that estimate is longer than a time
budget (it could not take a step), or where its warm-up and one step would pass what is left of
the allowance: TIMING_SHARE of the budget's training time (a time budget's own; for FLOPs and
tokens, the cheapest size's time to train them, as its probe estimates it), and never less than
MIN_TIMING_SECONDS. Otherwise it is timed for a warm-up step and `steps_to_time` more (as
`lmlab pretrain` times a `--minutes` budget), stopping after its warm-up and one step once the
allowance is spent.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
from tqdm import tqdm

from lmlab.compare.plan_budget import Budget
from lmlab.config import ModelConfig
from lmlab.model import LanguageModel
from lmlab.train.step import step_seconds

if TYPE_CHECKING:
    from lmlab.config.training import TrainConfig
    from lmlab.data.dataset import Dataset
    from lmlab.objectives.base import Objective

TIMING_SHARE = 0.05  # of the budget's training time, at most, spent timing sizes
MIN_TIMING_SECONDS = 5.0  # what a plan may spend however small its budget
_OUT_OF_MEMORY = "out of memory at --batch-size {config.batch_size} and --seq-len {config.seq_len}"


@dataclass(frozen=True)
class Size:
    """A candidate preset, counted but not yet timed."""

    name: str
    model: ModelConfig
    parameters: int
    non_embedding_parameters: int
    flops_per_token: float


@dataclass
class Timings:
    allowance: float | None  # seconds the plan may spend timing; None until known
    seconds: dict[str, float] = field(default_factory=dict)  # per step, of each size timed
    untimed: dict[str, str] = field(default_factory=dict)  # why a size has no step time
    spent: float = 0.0  # seconds spent timing

    @property
    def left(self) -> float:
        return max(self.allowance - self.spent, 0.0)


def time_sizes(sizes: list[Size], objective: Objective, dataset: Dataset,
               config: TrainConfig, budget: Budget, steps_to_time: int,
               device: torch.device) -> Timings:
    timings = Timings(_allowance(budget.amount * 60) if budget.kind == "minutes" else None)
    for size in tqdm(sorted(sizes, key=lambda s: s.flops_per_token), desc="timing",
                     unit="size"):  # the cheapest first, so the most sizes fit the allowance
        started = time.perf_counter()
        model = LanguageModel(size.model, heads=objective.heads).to(device)
        seconds, reason = _time_one(model, size, objective, dataset, config, budget,
                                    steps_to_time, timings, started)
        timings.spent += time.perf_counter() - started
        if seconds is None:
            timings.untimed[size.name] = reason
        else:
            timings.seconds[size.name] = seconds
    return timings


def _time_one(model: LanguageModel, size: Size, objective: Objective, dataset: Dataset,
              config: TrainConfig, budget: Budget, steps_to_time: int, timings: Timings,
              started: float) -> tuple[float | None, str | None]:
    """(seconds per step, None), or (None, why it was not timed)."""
    try:
        (row,) = step_seconds(model, objective, dataset.special, 1, config.seq_len,
                              config.precision, runs=1)
    except torch.OutOfMemoryError:
        return None, _OUT_OF_MEMORY.format(config=config)
    estimate = row * config.batch_size
    if timings.allowance is None:  # FLOPs or tokens: the cheapest size sets it
        timings.allowance = _allowance(_training_seconds(budget, size, estimate, config))
    left = timings.left - (time.perf_counter() - started)
    if budget.kind == "minutes" and estimate > budget.amount * 60:
        return None, (f"not timed: a step would take about {estimate:.3g} s (one row timed), "
                      f"longer than the whole budget")
    if 2 * estimate > left:
        return None, (f"not timed: its warm-up and one step would take about "
                      f"{2 * estimate:.3g} s (one row timed), past what is left of the plan's "
                      f"{timings.allowance:.3g} s for timing ({TIMING_SHARE:.0%} of the "
                      f"budget's time, at least {MIN_TIMING_SECONDS:g} s)")
    seconds = _seconds_per_step(model, objective, dataset, config, 1 + steps_to_time,
                                time.perf_counter() + left)
    return seconds, None if seconds is not None else _OUT_OF_MEMORY.format(config=config)


def _allowance(training_seconds: float) -> float:
    return max(TIMING_SHARE * training_seconds, MIN_TIMING_SECONDS)


def _training_seconds(budget: Budget, size: Size, seconds_per_step: float,
                      config: TrainConfig) -> float:
    """How long `size` would train on a FLOPs or tokens budget at `seconds_per_step`."""
    tokens = budget.amount if budget.kind == "tokens" else budget.amount / size.flops_per_token
    return tokens / (config.batch_size * config.seq_len) * seconds_per_step


def _seconds_per_step(model: LanguageModel, objective: Objective, dataset: Dataset,
                      config: TrainConfig, runs: int, deadline: float) -> float | None:
    """The fastest timed step after a warm-up one (as pretrain reads its timing), stopping
    after the first timed step once `deadline` (perf_counter) has passed; None when a step
    does not fit in the accelerator's memory."""
    timings = []
    try:
        for seconds in step_seconds(model, objective, dataset.special, config.batch_size,
                                    config.seq_len, config.precision, runs=runs):
            timings.append(seconds)
            if len(timings) >= 2 and time.perf_counter() >= deadline:
                break
    except torch.OutOfMemoryError:
        return None
    return min(timings[1:])
