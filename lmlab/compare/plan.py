"""`lmlab plan`: which model size to pre-train for a budget, measured on this machine.

Each candidate preset is built and timed for a few training steps of the objective on random
tokens, as `lmlab pretrain` times a `--minutes` budget. Its row gives the parameters, training
FLOPs per token (`objective_flops_per_token`: the objective's own predicted share), the measured
speed, the tokens the budget reaches, and the loss the Chinchilla-style fit predicts for them
(lmlab.compare.scaling: a guide between sizes, not a promise). The recommendation is the
candidate that fits the budget and lies closest, in log parameters, to the fit's
compute-optimal size.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import torch
from tqdm import tqdm

from lmlab.compare.scaling import CHINCHILLA
from lmlab.data.dataset import Dataset, open_or_prepare
from lmlab.model import LanguageModel
from lmlab.objectives.base import Objective
from lmlab.objectives.registry import build_objective
from lmlab.presets import FAMILIES, SIZES, preset
from lmlab.train.budget import parse_count
from lmlab.train.config import TrainConfig, check_before_data
from lmlab.train.pretrain import auto_family, step_seconds
from lmlab.train.throughput import objective_flops_per_token

# Muennighoff et al. 2023, "Scaling Data-Constrained Language Models": up to about four passes,
# repeated tokens are worth almost as much as new ones; beyond that their value fades.
USEFUL_PASSES = 4


@dataclass(frozen=True)
class Budget:
    kind: Literal["minutes", "flops", "tokens"]
    amount: float

    @classmethod
    def read(cls, minutes: float | None, flops: float | str | None,
             tokens: int | str | None) -> Budget:
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


@dataclass(frozen=True)
class Candidate:
    """One model size, measured, and what the budget buys it."""

    model: str  # the preset, e.g. gpt2-mini
    parameters: int
    non_embedding_parameters: int  # without the token embedding
    flops_per_token: float  # training FLOPs, with the objective's vocabulary share
    seconds_per_step: float | None  # measured; None when a step ran out of memory
    tokens_per_second: float | None
    tokens: int  # what the budget reaches (whole steps for a time budget)
    minutes: float | None  # to train those tokens at the measured speed
    tokens_per_parameter: float  # per non-embedding parameter
    passes: float  # over the dataset's training split
    predicted_loss: float | None  # the fit's L(parameters, tokens); None without tokens
    fits: bool  # it ran, and the budget holds at least one step


@dataclass(frozen=True)
class Optimum:
    """The fit's compute-optimal size for `flops`: the minimum of L(N, D) with C = 6·N·D."""

    flops: float
    parameters: float
    tokens: float
    loss: float

    @classmethod
    def for_flops(cls, flops: float) -> Optimum:
        parameters = CHINCHILLA.optimal_parameters(flops)
        tokens = flops / (6 * parameters)
        return cls(flops, parameters, tokens, CHINCHILLA.loss(parameters, tokens))


@dataclass(frozen=True)
class Plan:
    objective: str
    budget: Budget
    seq_len: int
    batch_size: int
    precision: str
    device: str
    data: str | None  # the dataset as given; None = the built-in corpus
    training_tokens: int  # in the dataset's training split
    candidates: list[Candidate]
    optimum: Optimum | None  # None when no candidate could be timed for a time budget
    recommended: str | None  # the preset to train, when one fits
    command: str | None  # `lmlab pretrain ...` for it
    warnings: list[str]

    def to_dict(self) -> dict:
        return {**asdict(self), "fit": asdict(CHINCHILLA)}


def plan(objective: str = TrainConfig.objective, *, minutes: float | None = None,
         flops: float | str | None = None, tokens: int | str | None = None,
         data: str | Path | None = None, family: str = "auto",
         sizes: Sequence[str] | str | None = None,
         seq_len: int = TrainConfig.seq_len, batch_size: int = TrainConfig.batch_size,
         precision: str = TrainConfig.precision, steps_to_time: int = 3) -> Plan:
    """Size a pre-training run of `objective` for one budget (`minutes`, `flops` or `tokens`)
    on `data` (a prepared dataset; None = the built-in corpus, prepared once). `family` is
    bert, gpt2, modern or auto (as `lmlab pretrain --model auto` chooses: bert for objectives
    that only read bidirectionally, else gpt2); `sizes` are preset sizes (default: all). Each
    is timed for `steps_to_time` steps after a warm-up one."""
    budget = Budget.read(minutes, flops, tokens)
    data = None if data is None else str(data)
    sizes = _sizes(sizes)
    if family not in ("auto", *FAMILIES):
        raise ValueError(f"unknown family {family!r}; choose from auto, {', '.join(FAMILIES)}")
    if steps_to_time < 1:
        raise ValueError(f"steps_to_time must be at least 1, got {steps_to_time}")
    config = TrainConfig(objective=objective, data=data, seq_len=seq_len,
                         batch_size=batch_size, precision=precision)
    check_before_data(config)
    dataset = open_or_prepare(data)
    built = build_objective(objective, dataset.special, word_starts=dataset.word_starts)
    family = auto_family(built) if family == "auto" else family
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    with tqdm(total=len(sizes) * (1 + steps_to_time), desc="timing", unit="step") as bar:
        candidates = [_measure(f"{family}-{size}", config, built, dataset, budget, device,
                               steps_to_time, bar) for size in sizes]
    flops_budget = _budget_flops(budget, candidates)
    optimum = Optimum.for_flops(flops_budget) if flops_budget else None
    # Without an optimum no candidate trained a step, so none fits.
    best = min((c for c in candidates if c.fits),
               key=lambda c: abs(math.log(c.parameters / optimum.parameters)), default=None)
    return Plan(
        objective=objective, budget=budget, seq_len=seq_len, batch_size=batch_size,
        precision=precision, device=_device_name(device), data=data,
        training_tokens=dataset.train.num_tokens, candidates=candidates, optimum=optimum,
        recommended=None if best is None else best.model,
        command=None if best is None else _pretrain_command(best, config),
        warnings=_warnings(candidates, config, dataset.train.num_tokens, best))


def _sizes(sizes: Sequence[str] | str | None) -> list[str]:
    if sizes is None:
        return list(SIZES)
    names = [s.strip() for s in sizes.split(",")] if isinstance(sizes, str) else list(sizes)
    for name in names:
        if name not in SIZES:
            raise ValueError(f"unknown size {name!r}; choose from {', '.join(SIZES)}")
    if not names:
        raise ValueError("give at least one size")
    return names


def _measure(name: str, config: TrainConfig, objective: Objective, dataset: Dataset,
             budget: Budget, device: torch.device, steps_to_time: int, bar: tqdm) -> Candidate:
    bar.set_description(f"timing {name}")
    model_cfg = preset(name, dataset.special.vocab_size, config.seq_len)
    model = LanguageModel(model_cfg, heads=objective.heads).to(device)
    per_token = objective_flops_per_token(model_cfg, config.seq_len, objective,
                                          config.batch_size)
    seconds = _seconds_per_step(model, objective, dataset, config, steps_to_time, bar)
    tokens_per_step = config.batch_size * config.seq_len
    if budget.kind == "minutes":
        tokens = 0 if seconds is None else int(budget.amount * 60 / seconds) * tokens_per_step
    else:
        tokens = int(budget.amount if budget.kind == "tokens" else budget.amount / per_token)
    parameters = model.num_parameters()
    non_embedding = model.num_parameters(include_embeddings=False)
    measured = seconds is not None
    return Candidate(
        model=name, parameters=parameters, non_embedding_parameters=non_embedding,
        flops_per_token=per_token, seconds_per_step=seconds,
        tokens_per_second=tokens_per_step / seconds if measured else None, tokens=tokens,
        minutes=tokens / tokens_per_step * seconds / 60 if measured else None,
        tokens_per_parameter=tokens / non_embedding,
        passes=tokens / dataset.train.num_tokens,
        predicted_loss=CHINCHILLA.loss(parameters, tokens) if tokens else None,
        fits=measured and tokens >= tokens_per_step)


def _seconds_per_step(model: LanguageModel, objective: Objective, dataset: Dataset,
                      config: TrainConfig, steps_to_time: int, bar: tqdm) -> float | None:
    """The fastest timed step after a warm-up one (as pretrain reads its timing); None when
    a step does not fit in the accelerator's memory."""
    timings = []
    try:
        for seconds in step_seconds(model, objective, dataset.special, config.batch_size,
                                    config.seq_len, config.precision, runs=1 + steps_to_time):
            timings.append(seconds)
            bar.update()
    except torch.OutOfMemoryError:
        return None
    return min(timings[1:])


def _budget_flops(budget: Budget, candidates: list[Candidate]) -> float | None:
    """The budget in FLOPs: as given; for tokens, the compute at which they are
    compute-optimal; for time, the most a candidate trains in it (the best measured speed)."""
    if budget.kind == "flops":
        return budget.amount
    if budget.kind == "tokens":
        return CHINCHILLA.flops_optimal_for(budget.amount)
    return max((c.tokens * c.flops_per_token for c in candidates if c.tokens), default=None)


def _pretrain_command(candidate: Candidate, config: TrainConfig) -> str:
    words = ["lmlab", "pretrain", "--objective", config.objective, "--model", candidate.model,
             "--tokens", str(candidate.tokens), "--seq-len", str(config.seq_len),
             "--batch-size", str(config.batch_size)]
    if config.data is not None:
        words += ["--data", str(config.data)]
    if config.precision != TrainConfig.precision:
        words += ["--precision", config.precision]
    return shlex.join(words)


def _warnings(candidates: list[Candidate], config: TrainConfig, training_tokens: int,
              best: Candidate | None) -> list[str]:
    found = []
    for c in candidates:
        if c.seconds_per_step is None:
            found.append(f"{c.model}: out of memory at --batch-size {config.batch_size} and "
                         f"--seq-len {config.seq_len}")
        elif not c.fits:
            found.append(f"{c.model}: the budget holds less than one step")
        if c.passes > USEFUL_PASSES:
            found.append(f"{c.model}: {c.tokens:,} tokens are {c.passes:.1f} passes over the "
                         f"{training_tokens:,} training tokens; repeating data adds little "
                         f"beyond about {USEFUL_PASSES} (Muennighoff et al. 2023)")
    if best is None:
        found.append("no candidate fits the budget")
    return found


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda: {torch.cuda.get_device_name(device)}"
    return f"cpu: {torch.get_num_threads()} threads"
