"""The one training loop, top to bottom in execution order, for every kind of training.

A setup (pre-training: lmlab/train/entry.py) builds a `Training`: the model, optimizer,
objective, a source of micro-batches and a validation. `run_training` then steps it: learning
rate, micro-batches, the step's device work (lmlab/train/step.py: forward and backward
normalised by the global target count, gradient clipping, the non-finite guard, the update),
logging with throughput and MFU, validation, checkpoints, and a clean stop on SIGINT/SIGTERM,
resumable exactly. Values come back to the host at log, validation and checkpoint steps only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

import torch
from torch import nn

from lmlab.config.training import LoopConfig
from lmlab.objectives.batch import Batch
from lmlab.objectives.losses import LossSum
from lmlab.runs.checkpoints import BEST, FINISHED, checkpoint_name, list_checkpoints
from lmlab.runs.layout import CHECKPOINTS, CURVES
from lmlab.train import distributed
from lmlab.train.checkpoint import LoopState, prune_checkpoints, save_checkpoint
from lmlab.train.deadline import DEADLINE_LOG_POINTS, Deadline
from lmlab.train.head_warmup import HeadWarmup
from lmlab.train.optim import muon_momentum, set_lr, set_muon_momentum
from lmlab.train.pace import Pace, Throughput
from lmlab.train.reporting import MetricsLog, ProgressBar
from lmlab.train.schedule import Schedule
from lmlab.train.step import (
    SkippedSteps,
    StepResult,
    clipped_grad_norm,
    forward_loss,
    guarded_update,
    train_step,
)
from lmlab.train.stopping import RunStopped, StopRequest
from lmlab.train.trackers import open_trackers
from lmlab.train.untie import untie_and_rebuild_optimizer, untie_step


class TrainingError(RuntimeError):
    """A run that cannot go on, stated in one line."""


class Loss(Protocol):
    """What the loop asks of an objective or a fine-tuning task: each loss term's target count
    before the forward pass, then the summed losses."""

    def target_counts(self, batch: Batch) -> dict[str, torch.Tensor]: ...

    def loss(self, outputs: dict, batch: Batch) -> LossSum: ...


class StepData(Protocol):
    """Where a step's micro-batches come from, resumable from `state_dict()`."""

    def micro_batches(self, step: int, generator: torch.Generator) -> list[Batch]: ...

    def state_dict(self) -> dict: ...


@dataclass
class Training:
    """What the loop needs, built by a setup."""

    cfg: LoopConfig
    env: distributed.Env
    model: nn.Module  # the plain model (checkpoints, clipping, validation)
    train_model: nn.Module  # the same, wrapped for DDP/FSDP2 when distributed
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler | None
    objective: Loss
    data: StepData
    schedule: Schedule
    validate: Callable[[], dict[str, float]]  # metrics of the model as it is now
    headline: Callable[[dict[str, float]], float]  # one number, lower is better
    out: Path
    state: LoopState
    flops_per_token: float
    peak_flops: float  # of all ranks together
    eval_every: int  # steps between validations (cfg's, or what the setup's training decides)
    checkpoint_every: int
    scores: tuple[str, ...] = ()  # validation metrics plotted beside the losses
    deadline: Deadline | None = None  # a time budget: the step count follows the pace
    title: str = ""  # of the curves plot: what was trained
    # What validation metrics say has gone wrong, read from half the run on (a slow start
    # has passed by then); none by default.
    warnings: Callable[[dict[str, float]], list[str]] | None = None
    # Continued training: validate the weights as they came, at step 0, before any update.
    validate_at_start: bool = False
    head_warmup: HeadWarmup | None = None  # new heads train alone for its first steps
    untie_at: float | None = None  # the fraction of the steps where a tied head unties


def step_seed(seed: int, rank: int, step: int) -> int:
    """Randomness is re-derived at every step, so a resumed run needs no RNG state."""
    return ((seed * 1_000_003 + rank) * 1_000_003 + step) % (2**63)


def device_step(t: Training, compute_loss, micro_batches) -> StepResult:
    """Forward, backward, clipping and the update, with a step whose loss or gradient norm is
    not finite skipped on the device: nothing is read back to the host."""
    loss, terms = train_step(t.train_model, compute_loss, t.objective, micro_batches, t.env,
                             t.cfg.precision, t.scaler)
    grad_norm = clipped_grad_norm(t.model, t.optimizer, t.scaler, t.cfg.grad_clip)
    finite = torch.isfinite(loss)
    if t.scaler is None:  # under a loss scaler overflowing gradients are routine: it skips them
        finite &= torch.isfinite(grad_norm)
    skip = ~finite
    guarded_update(t.optimizer, t.scaler, skip)
    return StepResult(loss, terms, grad_norm, skip.float())


def run_training(t: Training) -> LoopState:
    """Step `t` until its total steps or a stop request; returns the final loop state."""
    cfg, state = t.cfg, t.state
    t.model.backbone.checkpoint_blocks = cfg.activation_checkpointing
    compute_loss = forward_loss(t.train_model, t.objective, cfg.compile)
    log = MetricsLog(t.out, enable=t.env.is_main, trackers=open_trackers(
        cfg.report_to, t.out, state.step) if t.env.is_main else ())
    log.truncate_after(state.step)
    bar = ProgressBar(state.total_steps, initial=state.step, enable=t.env.is_main)
    stop = StopRequest()
    generator = torch.Generator()
    throughput = Throughput()
    skipped = SkippedSteps(state.nonfinite_streak, t.env.device)
    pace = Pace(bar.write, first_step=state.step)
    try:
        stopping = False
        _begin(t, log, pace)
        while state.step < state.total_steps and not stopping:
            lr, result = _step(t, compute_loss, generator, skipped, throughput)
            pace.step_done(state.step, state.total_steps)
            if t.deadline is not None:
                _keep_to_deadline(t, bar)
            stopping = _stop_requested(t, stop)
            if _log_due(t) or stopping:
                _log_step(t, log, bar, throughput, result, skipped, lr=lr)
            if _validate_and_save(t, log, skipped, stopping):
                break
        if t.env.is_main:
            log.plot(t.out / CURVES, t.scores, t.title)
    finally:
        stop.restore()
        bar.close()
        log.close()  # finishes the trackers, with the curves when drawn
    if stop.requested:
        if t.env.is_main:
            print(f"stopped at step {state.step}; checkpoint saved; continue with --resume")
        raise RunStopped(stop.signum)
    return state


def _begin(t: Training, log: MetricsLog, pace: Pace) -> None:
    """A continued run's start measured (after its head warm-up when it has one: the new
    heads are untrained at step 0); a continued run given no steps saved as it came."""
    if t.validate_at_start and t.state.step == 0:
        _validation(t, log, head_warmup_steps=t.head_warmup.steps if t.head_warmup else 0)
    if t.state.step == t.state.total_steps == 0:
        save_training(t, ended=True)
    else:
        pace.starting(t.state.total_steps, t.cfg.compile)


def _step(t: Training, compute_loss, generator: torch.Generator, skipped: SkippedSteps,
          throughput: Throughput) -> tuple[float, StepResult]:
    """One optimizer step at the schedule's rate, counted; returns the rate and the result."""
    state = t.state
    if t.head_warmup is not None:
        t.head_warmup.at(state.step)
    if (t.untie_at is not None and t.model.cfg.tie_embeddings
            and state.step >= untie_step(t.untie_at, state.total_steps)):
        t.optimizer = untie_and_rebuild_optimizer(t.model, t.optimizer, t.cfg)
    lr = t.cfg.lr * t.schedule(state.step)
    set_lr(t.optimizer, lr)
    set_muon_momentum(t.optimizer, muon_momentum(state.step, t.cfg.muon_momentum_warmup_steps))
    generator.manual_seed(step_seed(t.cfg.seed, t.env.rank, state.step))
    torch.manual_seed(step_seed(t.cfg.seed, t.env.rank, state.step) + 1)  # dropout
    micro_batches = t.data.micro_batches(state.step, generator)
    result = device_step(t, compute_loss, micro_batches)
    skipped.add(result.skipped)
    tokens = sum(batch.token_count() for batch in micro_batches) * t.env.world_size
    state.step += 1
    state.tokens += tokens
    state.data = t.data.state_dict()
    throughput.add(tokens)
    return lr, result


def _log_due(t: Training) -> bool:
    return t.state.step % _log_every(t) == 0 or t.state.step == t.state.total_steps


def _stop_requested(t: Training, stop: StopRequest) -> bool:
    """Whether SIGINT/SIGTERM asked to stop. Across ranks this takes a collective, so they
    agree at log steps only: every rank takes the same branch and stops together."""
    if not t.env.distributed:
        return stop.requested
    return _log_due(t) and distributed.any_rank((stop.requested,), t.env)[0]


def _log_every(t: Training) -> int:
    """--log-every; but a time budget left to validate as it sees fit logs often enough for
    its curve to have DEADLINE_LOG_POINTS points."""
    if t.deadline is None or not t.deadline.validations:
        return t.cfg.log_every
    return max(1, min(t.cfg.log_every, t.state.total_steps // DEADLINE_LOG_POINTS))


def _keep_to_deadline(t: Training, bar: ProgressBar) -> None:
    """Re-estimate the step count from the pace so far (rank 0's, for every rank), and
    stretch or shrink the learning-rate schedule to it."""
    state = t.state
    total = distributed.from_rank_0(t.deadline.total_steps(state.step), t.env)
    if total != state.total_steps:
        state.total_steps = total
        t.schedule = replace(t.schedule, total_steps=total,
                             warmup_steps=min(t.schedule.warmup_steps, total))
        bar.set_total(total)


def _log_step(t: Training, log: MetricsLog, bar: ProgressBar, throughput: Throughput,
              result: StepResult, skipped: SkippedSteps, lr: float) -> None:
    """Read the step's figures back (the one wait for the device in most steps) and log them,
    with the steps skipped since the last line."""
    names = sorted(result.terms)
    loss, grad_norm, *terms = torch.stack(
        [v.float() for v in (result.loss, result.grad_norm, *(result.terms[n] for n in names))]
    ).tolist()
    _settle(t, skipped)
    # timed once the device has caught up: from one read-back to the next
    tokens_per_second = throughput.take()
    mfu = tokens_per_second * t.flops_per_token / t.peak_flops
    unlogged = skipped.take_unlogged()
    extra = {"skipped_nonfinite": unlogged} if unlogged else {}
    log.log("train", t.state.step, loss=loss, lr=lr, grad_norm=grad_norm,
            tokens=t.state.tokens, tokens_per_second=tokens_per_second, mfu=mfu,
            **{f"{n}_loss": v for n, v in zip(names, terms, strict=True)}, **extra)
    bar.update(t.state.step, loss=loss, lr=lr, tokens_per_second=tokens_per_second)


def _settle(t: Training, skipped: SkippedSteps) -> None:
    """Bring the skipped-step counters into the loop state (what a checkpoint holds), and stop
    a run whose loss stayed non-finite too long."""
    state = t.state
    new, state.nonfinite_streak, longest = skipped.read()
    state.nonfinite_steps += new
    if longest >= t.cfg.max_nonfinite_steps:
        raise TrainingError(
            f"the loss was not finite for {longest} steps in a row (seen at step "
            f"{state.step}); stopping. The last good checkpoint is {_latest(t.out)}; try a "
            f"lower --lr or --precision fp32")


def _validate_and_save(t: Training, log: MetricsLog, skipped: SkippedSteps,
                       stopping: bool) -> bool:
    """Validate every `eval_every` steps and at the end; save on a new best, at the end, when
    stopping and every `checkpoint_every` steps. Returns whether to stop early: `patience`
    validations in a row without a new best."""
    state, cfg = t.state, t.cfg
    finished = state.step == state.total_steps
    improved = early_stop = False
    deadline_due = t.deadline is not None and distributed.from_rank_0(
        t.deadline.validation_due(), t.env)
    warmed_up = t.head_warmup is not None and t.head_warmup.ends_at(state.step)
    validating = state.step % t.eval_every == 0 or finished or deadline_due or warmed_up
    saving = finished or stopping or state.step % t.checkpoint_every == 0
    if not (validating or saving):
        return False
    _settle(t, skipped)
    if validating:
        metrics = _validation(t, log)
        improved = t.headline(metrics) < state.best_eval
        if improved:
            state.best_eval = t.headline(metrics)
            state.best_checkpoint = checkpoint_name(state.step)
        state.evals_since_best = 0 if improved else state.evals_since_best + 1
        if t.warnings is not None and t.env.is_main and 2 * state.step >= state.total_steps:
            for line in t.warnings(metrics):
                print(f"\nwarning: {line}")
        early_stop = cfg.patience is not None and state.evals_since_best >= cfg.patience
        if early_stop and t.env.is_main:
            print(f"\nstopping early at step {state.step}: no better validation in "
                  f"{cfg.patience} evaluations")
    if improved or saving or early_stop:
        save_training(t, ended=finished or early_stop)
    return early_stop


def _validation(t: Training, log: MetricsLog, **noted: float) -> dict[str, float]:
    """Validate the model as it is now and log the metrics (and `noted`) as an `eval`
    record; a time budget is told how long it took."""
    started = time.perf_counter()
    metrics = t.validate()
    if t.deadline is not None:
        t.deadline.validated(started)
    log.log("eval", t.state.step, **metrics, **noted)
    return metrics


def save_training(t: Training, ended: bool) -> None:
    """Rank 0 writes the checkpoint (`ended`: the run ends with it); under FSDP2 every rank
    gathers weights and writes its optimizer shard."""
    sharded = distributed.is_sharded(t.model)
    if not (t.env.is_main or sharded):
        return
    directory = t.out / CHECKPOINTS
    weights = distributed.full_weights(t.model)
    loop_state = {"loop": vars(t.state).copy()}
    metadata = {BEST: t.state.best_checkpoint, FINISHED: ended}  # read without the state
    if sharded:
        save_checkpoint(directory, t.state.step, weights, loop_state, metadata,
                        shard=distributed.local_optimizer_state(t.optimizer), env=t.env)
    else:
        save_checkpoint(directory, t.state.step, weights,
                        {**loop_state, "optimizer": t.optimizer.state_dict()}, metadata)
    if t.env.is_main:
        best = t.state.best_checkpoint
        prune_checkpoints(directory, t.cfg.keep_last, {directory / best} if best else set())


def _latest(out: Path) -> str:
    found = list_checkpoints(out / CHECKPOINTS)
    return str(found[-1]) if found else "none (no checkpoint was written yet)"
