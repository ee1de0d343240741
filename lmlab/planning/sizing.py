"""`lmlab plan`: which model size to pre-train for a budget, measured on this machine.

Each candidate preset is counted, then timed for a few training steps of the objective on
random tokens, as `lmlab pretrain` times a `--minutes` budget, within a small share of the
budget (lmlab.planning.timing: a size that cannot be timed in it is left untimed, and
said so). Its row gives the parameters, training FLOPs per token (`objective_flops_per_token`:
the objective's own predicted share), the measured speed, the tokens the budget reaches, and
how much higher the Chinchilla-style fit puts its loss than the lowest among the candidates
(lmlab.planning.scaling: fitted elsewhere, so its values compare candidates and promise no
loss). The recommendation is the candidate that fits the budget and lies closest, in log
parameters, to the fit's compute-optimal size; when none fits, the smallest, with the time it
needs on this machine (at least one step, as a step time measured or estimated says).
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from lmlab.config import ModelConfig
from lmlab.config.presets import FAMILIES, SIZES, auto_family, preset
from lmlab.config.training import TrainConfig
from lmlab.data.dataset import Dataset
from lmlab.data.preparation.entry import open_or_prepare
from lmlab.model import LanguageModel
from lmlab.model.flops import objective_flops_per_token
from lmlab.objectives.base import Objective
from lmlab.objectives.registry import build_objective, check_before_data
from lmlab.planning.compute_budget import ComputeBudget
from lmlab.planning.scaling import CHINCHILLA
from lmlab.planning.timing import Size, Timings, time_sizes
from lmlab.runs.layout import CONFIG, split_init
from lmlab.runs.schema import RunConfigError, read_run_config

# Muennighoff et al. 2023, "Scaling Data-Constrained Language Models": up to about four passes,
# repeated tokens are worth almost as much as new ones; beyond that their value fades.
USEFUL_PASSES = 4


@dataclass(frozen=True)
class Candidate:
    """One model size, measured, and what the budget buys it."""

    model: str  # the preset, e.g. gpt2-mini
    parameters: int
    non_embedding_parameters: int  # without the token embedding
    flops_per_token: float  # training FLOPs, with the objective's vocabulary share
    seconds_per_step: float | None  # measured; None when not timed (see not_timed)
    not_timed: str | None  # why there is no step time: out of memory, or too slow to time
    # a step's time estimated from one row (high: one row uses a machine less well than
    # many); None when not probed
    estimated_seconds_per_step: float | None
    tokens_per_second: float | None
    tokens: int  # what the budget reaches (whole steps for a time budget)
    minutes: float | None  # to train those tokens at the measured speed
    tokens_per_parameter: float  # per non-embedding parameter
    passes: float  # over the dataset's training split
    # The fit's L(parameters, tokens) less the lowest among the candidates: it orders them,
    # and is no loss a run will show (the fit is for other data, tokenizer and sizes). None
    # without tokens.
    fit_loss_above_best: float | None
    fits: bool  # it ran, and the budget holds at least one step


@dataclass(frozen=True)
class Optimum:
    """The fit's compute-optimal size for `flops`: the minimum of L(N, D) with C = 6·N·D."""

    flops: float
    parameters: float
    tokens: float

    @classmethod
    def for_flops(cls, flops: float) -> Optimum:
        parameters = CHINCHILLA.optimal_parameters(flops)
        return cls(flops, parameters, flops / (6 * parameters))


@dataclass(frozen=True)
class Plan:
    objective: str
    budget: ComputeBudget
    seq_len: int
    batch_size: int
    precision: str
    device: str
    data: str | None  # the dataset as given; None = the built-in corpus
    training_tokens: int  # in the dataset's training split
    candidates: list[Candidate]
    optimum: Optimum | None  # None when no candidate could be timed for a time budget
    recommended: str  # the preset to train: the best that fits, else the smallest
    fits: bool  # whether it fits the budget as timed
    # When it does not: the minutes its command's budget takes on this machine, as timed or
    # estimated (None where no step of it ran: out of memory).
    needed_minutes: float | None
    command: str  # `lmlab pretrain ...` for it
    warnings: list[str]
    timing_seconds: float  # spent timing the sizes
    timing_allowance_seconds: float  # what the budget allowed for it

    def to_dict(self) -> dict:
        return {**asdict(self), "fit": asdict(CHINCHILLA)}


def plan(objective: str = TrainConfig.objective, *, minutes: float | None = None,
         flops: float | str | None = None, tokens: int | str | None = None,
         data: str | Path | None = None, family: str = "auto",
         sizes: Sequence[str] | str | None = None,
         seq_len: int = TrainConfig.seq_len, batch_size: int = TrainConfig.batch_size,
         precision: str = TrainConfig.precision, steps_to_time: int = 3,
         init: str | Path | None = None) -> Plan:
    """Size a pre-training run of `objective` for one budget (`minutes`, `flops` or `tokens`)
    on `data` (a prepared dataset; None = the built-in corpus, prepared once). `family` is
    a family or auto (as `lmlab pretrain --model auto` chooses: modernbert for objectives
    that only read bidirectionally, else modern); `sizes` are preset sizes (default: all). Each
    is timed for `steps_to_time` steps after a warm-up one, as far as a small share of the
    budget allows (lmlab.planning.timing). With `init` (RUN or RUN:CHECKPOINT) the one
    candidate is that run's model, as `lmlab pretrain --init` and `lmlab compare --init`
    continue it."""
    budget = ComputeBudget.read(minutes, flops, tokens)
    data = None if data is None else str(data)
    _check_choices(init, family, sizes, steps_to_time)
    sizes = _sizes(sizes)
    config = TrainConfig(objective=objective, data=data, seq_len=seq_len,
                         batch_size=batch_size, precision=precision)
    check_before_data(config)
    dataset = open_or_prepare(data)
    built = build_objective(objective, dataset.special, word_starts=dataset.word_starts)
    family = auto_family(built) if family == "auto" else family
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    models = ({str(init): _source_model(str(init), dataset)} if init is not None else
              {f"{family}-{size}": preset(f"{family}-{size}", dataset.special.vocab_size,
                                          config.seq_len) for size in sizes})
    counted = [_size(name, model_cfg, config, built) for name, model_cfg in models.items()]
    timings = time_sizes(counted, built, dataset, config, budget, steps_to_time, device)
    candidates = _candidates(counted, timings, config, dataset, budget)
    flops_budget = _budget_flops(budget, candidates)
    optimum = Optimum.for_flops(flops_budget) if flops_budget else None
    # Without an optimum no candidate trained a step, so none fits.
    best = min((c for c in candidates if c.fits),
               key=lambda c: abs(math.log(c.parameters / optimum.parameters)), default=None)
    chosen = best or min(candidates, key=lambda c: c.parameters)
    command_budget, needed_minutes = ((budget, None) if best else
                                      _needed(chosen, config, budget))
    return Plan(
        objective=objective, budget=budget, seq_len=seq_len, batch_size=batch_size,
        precision=precision, device=_device_name(device), data=data,
        training_tokens=dataset.train.num_tokens, candidates=candidates, optimum=optimum,
        recommended=chosen.model, fits=best is not None, needed_minutes=needed_minutes,
        command=_pretrain_command(chosen, config, command_budget, init),
        warnings=_warnings(candidates, dataset.train.num_tokens),
        timing_seconds=timings.spent, timing_allowance_seconds=timings.allowance)


def _check_choices(init: str | Path | None, family: str, sizes, steps_to_time: int) -> None:
    """Refuse, before any timing, what the plan cannot take."""
    if init is not None and (family != "auto" or sizes is not None):
        raise ValueError(f"--init takes the model from {init}; leave out --family and --sizes")
    if family not in ("auto", *FAMILIES):
        raise ValueError(f"unknown family {family!r}; choose from auto, {', '.join(FAMILIES)}")
    if steps_to_time < 1:
        raise ValueError(f"steps_to_time must be at least 1, got {steps_to_time}")


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


def _source_model(init: str, dataset: Dataset) -> ModelConfig:
    """The model of the run `init` names, which must read the dataset's vocabulary."""
    run, _ = split_init(init)
    try:
        model_cfg = read_run_config(run / CONFIG).model
    except (OSError, RunConfigError) as error:
        raise ValueError(f"--init {init}: {run} is not a readable lmlab run ({error})") from None
    if model_cfg.vocab_size != dataset.special.vocab_size:
        raise ValueError(f"--init {init}: its vocabulary ({model_cfg.vocab_size} tokens) is not "
                         f"the dataset's ({dataset.special.vocab_size}); prepare the text with "
                         f"its tokenizer: lmlab prepare TEXT --tokenizer {run} --out DIR")
    return model_cfg


def _size(name: str, model_cfg: ModelConfig, config: TrainConfig, objective: Objective) -> Size:
    """A model counted on the meta device: no memory, no time, whatever its size."""
    with torch.device("meta"):
        model = LanguageModel(model_cfg, heads=objective.heads)
    return Size(name, model_cfg, model.num_parameters(),
                model.num_parameters(include_embeddings=False),
                objective_flops_per_token(model_cfg, config.seq_len, objective,
                                          config.batch_size))


def _candidates(sizes: list[Size], timings: Timings, config: TrainConfig, dataset: Dataset,
                budget: ComputeBudget) -> list[Candidate]:
    tokens_per_step = config.batch_size * config.seq_len
    found = []
    for size in sizes:
        seconds = timings.seconds.get(size.name)
        if budget.kind == "minutes":
            steps = 0 if seconds is None else int(budget.amount * 60 / seconds)
            tokens = steps * tokens_per_step
        else:
            tokens = int(budget.amount if budget.kind == "tokens"
                         else budget.amount / size.flops_per_token)
        measured = seconds is not None
        found.append(dict(
            model=size.name, parameters=size.parameters,
            non_embedding_parameters=size.non_embedding_parameters,
            flops_per_token=size.flops_per_token, seconds_per_step=seconds,
            not_timed=timings.untimed.get(size.name),
            estimated_seconds_per_step=timings.estimates.get(size.name),
            tokens_per_second=tokens_per_step / seconds if measured else None, tokens=tokens,
            minutes=tokens / tokens_per_step * seconds / 60 if measured else None,
            tokens_per_parameter=tokens / size.non_embedding_parameters,
            passes=tokens / dataset.train.num_tokens,
            fits=measured and tokens >= tokens_per_step))
    losses = [CHINCHILLA.loss(c["parameters"], c["tokens"]) if c["tokens"] else None
              for c in found]
    lowest = min((loss for loss in losses if loss is not None), default=0.0)
    return [Candidate(**c, fit_loss_above_best=None if loss is None else loss - lowest)
            for c, loss in zip(found, losses, strict=True)]


def _needed(candidate: Candidate, config: TrainConfig,
            budget: ComputeBudget) -> tuple[ComputeBudget, float | None]:
    """What `candidate`, fitting no budget as timed, needs for at least one step, as a budget
    for its pretrain command and the minutes that takes here, at its step time (measured,
    else estimated): for a time budget, the budget or the whole minutes a step takes if more;
    for FLOPs and tokens, the budget's tokens or one step's if more. Where no step of it ran
    (out of memory), the budget as given and no minutes."""
    seconds = candidate.seconds_per_step or candidate.estimated_seconds_per_step
    if seconds is None:
        return budget, None
    if budget.kind == "minutes":
        minutes = max(budget.amount, math.ceil(seconds / 60))
        return ComputeBudget("minutes", minutes), minutes
    tokens_per_step = config.batch_size * config.seq_len
    steps = max(math.ceil(candidate.tokens / tokens_per_step), 1)
    return ComputeBudget("tokens", steps * tokens_per_step), steps * seconds / 60


def _budget_flops(budget: ComputeBudget, candidates: list[Candidate]) -> float | None:
    """The budget in FLOPs: as given; for tokens, the compute at which they are
    compute-optimal; for time, the most a candidate trains in it (the best measured speed)."""
    if budget.kind == "flops":
        return budget.amount
    if budget.kind == "tokens":
        return CHINCHILLA.flops_optimal_for(budget.amount)
    return max((c.tokens * c.flops_per_token for c in candidates if c.tokens), default=None)


def _pretrain_command(candidate: Candidate, config: TrainConfig, budget: ComputeBudget,
                      init: str | Path | None) -> str:
    """The `lmlab pretrain` that trains the plan: a time budget stays one (the run times
    itself on the machine it runs on), a token budget stays its count, FLOPs become the
    candidate's tokens; a run directory of its own, so that it overwrites no other run."""
    amount = (["--minutes", f"{budget.amount:g}"] if budget.kind == "minutes"
              else ["--tokens", str(int(budget.amount) if budget.kind == "tokens"
                                    else candidate.tokens)])
    start = ["--model", candidate.model] if init is None else ["--init", str(init)]
    words = ["lmlab", "pretrain", "--objective", config.objective, *start,
             *amount, "--seq-len", str(config.seq_len), "--batch-size", str(config.batch_size)]
    if config.data is not None:
        words += ["--data", str(config.data)]
    if config.precision != TrainConfig.precision:
        words += ["--precision", config.precision]
    out = f"runs/{config.objective}-{Path(candidate.model).name if init else candidate.model}"
    return shlex.join([*words, "--out", re.sub(r"[^\w.+/-]+", "-", out)])


def _warnings(candidates: list[Candidate], training_tokens: int) -> list[str]:
    found = []
    for c in candidates:
        if c.not_timed is not None:
            found.append(f"{c.model}: {c.not_timed}")
        elif not c.fits:
            found.append(f"{c.model}: the budget holds less than one step")
        if c.passes > USEFUL_PASSES:
            found.append(f"{c.model}: {c.tokens:,} tokens are {c.passes:.1f} passes over the "
                         f"{training_tokens:,} training tokens; repeating data adds little "
                         f"beyond about {USEFUL_PASSES} (Muennighoff et al. 2023)")
    return found


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda: {torch.cuda.get_device_name(device)}"
    return f"cpu: {torch.get_num_threads()} threads"
