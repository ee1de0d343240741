"""Timing a plan's candidate sizes within a small share of the budget it plans.

The allowance is TIMING_SHARE of the budget's training time (a time budget's own; for FLOPs
and tokens, the cheapest size's time to train them, as its probe estimates it), and never less
than MIN_TIMING_SECONDS. Sizes are timed cheapest first, and the clock is read between
measurements: none starts that its expected time would carry past the allowance, and once the
allowance is spent the larger sizes are left untimed, and said so.

Each size is first probed: PROBE_RUNS training steps of a single row, the fastest kept (the
first also warms up, and a busy machine slows some), whose time times the batch's rows
estimates a step (high, as one row uses a machine less well than many). A size is left untimed
where that estimate is longer than a time budget (it could not take a step), or where its
warm-up and one step would pass what is left of the allowance. Otherwise it is timed for a
warm-up step and `steps_to_time` more (as `lmlab pretrain` times a `--minutes` budget), the
fastest kept, stopping after its warm-up and one step where the next would pass the allowance.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
from tqdm import tqdm

from lmlab.config import ModelConfig
from lmlab.model import LanguageModel
from lmlab.planning.compute_budget import ComputeBudget
from lmlab.train.step import step_seconds

if TYPE_CHECKING:
    from lmlab.config.training import TrainConfig
    from lmlab.data.dataset import Dataset
    from lmlab.objectives.base import Objective

TIMING_SHARE = 0.05  # of the budget's training time, at most, spent timing sizes
MIN_TIMING_SECONDS = 5.0  # what a plan may spend however small its budget
PROBE_RUNS = 3  # one-row steps per size, the fastest kept
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
    # per step, from each size's one-row probe: timed or not, what a step would take
    estimates: dict[str, float] = field(default_factory=dict)
    untimed: dict[str, str] = field(default_factory=dict)  # why a size has no step time
    spent: float = 0.0  # seconds spent timing
    # a one-row step's seconds per training FLOP per token, of the size probed last: a larger
    # size's first one-row step is expected to take at least its FLOPs at this rate
    probe_rate: float | None = None

    @property
    def left(self) -> float:
        return float("inf") if self.allowance is None else max(self.allowance - self.spent, 0.0)

    def why_not_probed(self, size: Size) -> str | None:
        """Why `size` is not timed at all: the allowance is spent, or its probe would pass
        it; None when it may be probed."""
        if self.allowance is not None and self.left == 0:
            return (f"not timed: the plan's {self.allowance:.3g} s for timing were spent on "
                    f"smaller sizes")
        expected = None if self.probe_rate is None else self.probe_rate * size.flops_per_token
        if expected is not None and expected > self.left:
            return (f"not timed: a step of one row would take about {expected:.3g} s, past "
                    f"what is left of the plan's {self.allowance:.3g} s for timing")
        return None


def time_sizes(sizes: list[Size], objective: Objective, dataset: Dataset,
               config: TrainConfig, budget: ComputeBudget, steps_to_time: int,
               device: torch.device) -> Timings:
    timings = Timings(_allowance(budget.amount * 60) if budget.kind == "minutes" else None)
    for size in tqdm(sorted(sizes, key=lambda s: s.flops_per_token), desc="timing",
                     unit="size"):  # the cheapest first, so the most sizes fit the allowance
        reason = timings.why_not_probed(size)
        if reason is not None:
            timings.untimed[size.name] = reason
            continue
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
              config: TrainConfig, budget: ComputeBudget, steps_to_time: int, timings: Timings,
              started: float) -> tuple[float | None, str | None]:
    """(seconds per step, None), or (None, why it was not timed)."""
    try:
        row = _fastest(step_seconds(model, objective, dataset.special, 1, config.seq_len,
                                    config.precision, runs=PROBE_RUNS),
                       started + timings.left, warm_up=0)
    except torch.OutOfMemoryError:
        return None, _OUT_OF_MEMORY.format(config=config)
    estimate = row * config.batch_size
    timings.estimates[size.name] = estimate
    timings.probe_rate = row / size.flops_per_token
    if timings.allowance is None:  # FLOPs or tokens: the cheapest size sets it
        timings.allowance = _allowance(_training_seconds(budget, size, estimate, config))
    deadline = started + timings.left
    if budget.kind == "minutes" and estimate > budget.amount * 60:
        return None, (f"not timed: a step would take about {estimate:.3g} s (one row timed), "
                      f"longer than the whole budget")
    if 2 * estimate > deadline - time.perf_counter():
        return None, (f"not timed: its warm-up and one step would take about "
                      f"{2 * estimate:.3g} s (one row timed), past what is left of the plan's "
                      f"{timings.allowance:.3g} s for timing ({TIMING_SHARE:.0%} of the "
                      f"budget's time, at least {MIN_TIMING_SECONDS:g} s)")
    try:
        seconds = _fastest(step_seconds(model, objective, dataset.special, config.batch_size,
                                        config.seq_len, config.precision,
                                        runs=1 + steps_to_time), deadline, warm_up=1)
    except torch.OutOfMemoryError:
        return None, _OUT_OF_MEMORY.format(config=config)
    return seconds, None


def _fastest(measured: Iterable[float], deadline: float, warm_up: int) -> float:
    """The fastest of the `measured` step times after the first `warm_up` (steady state: a
    busy machine only ever slows a step), taking no more once the next, as fast as the
    fastest, would end past `deadline` (a perf_counter reading)."""
    kept = []
    for count, seconds in enumerate(measured, start=1):
        if count > warm_up:
            kept.append(seconds)
            if time.perf_counter() + min(kept) > deadline:
                break
    return min(kept)


def _allowance(training_seconds: float) -> float:
    return max(TIMING_SHARE * training_seconds, MIN_TIMING_SECONDS)


def _training_seconds(budget: ComputeBudget, size: Size, seconds_per_step: float,
                      config: TrainConfig) -> float:
    """How long `size` would train on a FLOPs or tokens budget at `seconds_per_step`."""
    tokens = budget.amount if budget.kind == "tokens" else budget.amount / size.flops_per_token
    return tokens / (config.batch_size * config.seq_len) * seconds_per_step
