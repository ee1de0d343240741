"""The sub-runs that make up a comparison: every arm at every budget fraction and seed, with the
steps its matched budget buys, and with --init the control, the source as it came."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from lmlab.compare.design import CONTROL, CompareConfig, label
from lmlab.compare.measures import check_held_out
from lmlab.config.presets import preset
from lmlab.model.flops import objective_flops_per_token
from lmlab.objectives.registry import build_objective

if TYPE_CHECKING:
    from lmlab.config import ModelConfig
    from lmlab.data.dataset import Dataset


@dataclass(frozen=True)
class Start:
    """What every arm's pre-training starts from: the model it trains and, with --init, the
    run's own objective, which the control runs for no steps (a run of the source as it came)."""

    model: ModelConfig
    objective: str | None = None  # None: random weights, and no control


@dataclass(frozen=True)
class SubRun:
    """One pre-training run of the comparison, and what it is owed."""

    objective: str
    seed: int
    fraction: float
    steps: int | None  # None under a time budget
    minutes: float | None
    flops_per_step: float  # counted (lmlab.train.flops), not measured
    tokens_per_step: int
    predictions_per_step: float  # positions that carry a target, as the objective counts
    out: Path = field(compare=False)
    trains: str | None = None  # the objective pre-training runs; None: `objective` itself

    @property
    def key(self) -> tuple[str, float, int]:
        return self.objective, self.fraction, self.seed

    @property
    def pretrains_with(self) -> str:
        return self.trains or self.objective


def sub_runs(cfg: CompareConfig, dataset: Dataset, start: Start | None = None) -> list[SubRun]:
    """Every (objective, budget fraction, seed), with its steps under the matched budget, each
    from `start` (None: --model's random weights); the held-out text is checked here too, so
    that no design fails after training."""
    check_held_out(dataset, cfg.eval_tokens)
    start = start or Start(preset(cfg.model, dataset.special.vocab_size, cfg.seq_len))
    model = start.model
    tokens_per_step = cfg.batch_size * cfg.seq_len
    found = []
    for spec in cfg.objectives:
        if spec == CONTROL:
            found += _control(cfg, start, tokens_per_step)
            continue
        objective = build_objective(spec, dataset.special, cfg.objective_settings,
                                    dataset.word_starts)
        share = objective.target_fraction(cfg.batch_size, cfg.seq_len)
        per_step = (objective_flops_per_token(model, cfg.seq_len, objective, cfg.batch_size)
                    * tokens_per_step)
        for fraction in sorted(cfg.fractions):
            owed = fraction * cfg.amount
            steps = {"flops": owed / per_step if per_step else 0,
                     "tokens": owed / tokens_per_step, "steps": owed, "time": None}[cfg.match]
            if steps is not None and round(steps) < 1:
                raise ValueError(
                    f"--budget {cfg.budget} is too small: {spec} at {fraction:g} of it gets "
                    f"{steps:.2f} steps of {per_step:.3g} FLOPs ({tokens_per_step} tokens)")
            for seed in range(cfg.seeds):
                found.append(SubRun(
                    spec, seed, fraction, None if steps is None else round(steps),
                    owed if cfg.match == "time" else None, per_step, tokens_per_step,
                    share * tokens_per_step,
                    Path(cfg.out) / "runs" / label(spec) / f"budget-{fraction:g}" /
                    f"seed-{seed}"))
    return found


def _control(cfg: CompareConfig, start: Start, tokens_per_step: int) -> list[SubRun]:
    """The control at every budget fraction and seed: one run of no steps, the source as it
    came (its own objective, so its heads are its own), read wherever an arm is compared."""
    out = Path(cfg.out) / "runs" / label(CONTROL)
    return [SubRun(CONTROL, seed, fraction, 0, None, 0.0, tokens_per_step, 0.0, out,
                   trains=start.objective)
            for fraction in sorted(cfg.fractions) for seed in range(cfg.seeds)]
