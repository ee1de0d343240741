"""The one training loop, top to bottom in execution order, for every kind of training.

A setup (pre-training: lmlab/train/pretrain.py) builds a `Training`: the model, optimizer,
objective, a source of micro-batches and a validation. `run_training` then steps it: learning
rate, micro-batches, forward and backward normalised by the global target count, gradient
clipping, the non-finite guard, logging with throughput and MFU, validation, checkpoints, and
a clean stop on SIGINT/SIGTERM, resumable exactly.
"""

from __future__ import annotations

import math
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

import torch
from torch import nn

from lmlab.objectives.base import Batch, LossSum
from lmlab.runs.checkpoints import BEST, checkpoint_name, list_checkpoints
from lmlab.runs.layout import CHECKPOINTS, CURVES
from lmlab.train import distributed
from lmlab.train.budget import DEADLINE_LOG_POINTS, Deadline
from lmlab.train.checkpoint import load_optimizer_shard, prune_checkpoints, save_checkpoint
from lmlab.train.config import LoopConfig
from lmlab.train.metrics import MetricsLog, ProgressBar
from lmlab.train.precision import autocast
from lmlab.train.schedule import Schedule


class TrainingError(RuntimeError):
    """A run that cannot go on, stated in one line."""


@dataclass
class LoopState:
    """Everything besides weights and optimizer that an exact resume needs."""

    step: int = 0
    total_steps: int = 0
    tokens: int = 0
    nonfinite_steps: int = 0
    nonfinite_streak: int = 0
    best_eval: float = math.inf
    best_checkpoint: str = ""
    evals_since_best: int = 0
    data: dict = field(default_factory=dict)


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
    scores: tuple[str, ...] = ()  # validation metrics plotted beside the losses
    deadline: Deadline | None = None  # a time budget: the step count follows the pace
    title: str = ""  # of the curves plot: what was trained


def step_seed(seed: int, rank: int, step: int) -> int:
    """Randomness is re-derived at every step, so a resumed run needs no RNG state."""
    return ((seed * 1_000_003 + rank) * 1_000_003 + step) % (2**63)


class RunStopped(KeyboardInterrupt):
    """A run stopped by SIGINT or SIGTERM once its checkpoint was saved: the command exits
    128 + the signal's number (130 for Ctrl-C), as an interrupted shell command does."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class StopRequest:
    """SIGINT / SIGTERM end the run after the current step, with a checkpoint."""

    def __init__(self) -> None:
        self.requested = False
        self.signum = signal.SIGINT
        self.previous = {s: signal.signal(s, self._handle) for s in (signal.SIGINT,
                                                                     signal.SIGTERM)}

    def _handle(self, signum, frame) -> None:
        self.requested = True
        self.signum = signum

    def restore(self) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)


def forward_loss(model, objective: Loss, compile_model: bool):
    """batch → LossSum. Vocabulary heads hand their features to the fused, chunked
    projection + cross-entropy (lmlab/model/linear_cross_entropy.py), so full logits are never
    materialised. With `compile_model` the model is compiled as one graph and the loss stays
    eager: as fast as inductor's own fusion of projection and log-softmax (measured, bf16 on
    2 cores), and it never holds the logits."""
    forward = torch.compile(model) if compile_model else model

    def run(batch) -> LossSum:
        return objective.loss(forward(**batch.model_inputs(), unprojected=True), batch)

    return run


def train_step(model, compute_loss, objective: Loss, micro_batches, env, precision,
               scaler):
    """Forward and backward over a step's micro-batches; the loss is normalised by the
    global target count of each term. Returns (loss, per-term losses) of the step."""
    counts = {}
    for batch in micro_batches:
        for term, count in objective.target_counts(batch).items():
            counts[term] = counts.get(term, 0) + count
    counts = distributed.all_reduce_sum({k: torch.as_tensor(v) for k, v in counts.items()}, env)
    counts = {k: v.to(env.device).float() for k, v in counts.items()}
    step_loss = torch.zeros((), device=env.device)
    term_losses: dict[str, torch.Tensor] = {}
    for index, batch in enumerate(micro_batches):
        last = index == len(micro_batches) - 1
        batch = batch.to(env.device)
        with distributed.gradient_sync(model, enabled=last), autocast(precision, env.device):
            loss = compute_loss(batch)
            # DDP averages gradients over ranks; scaling by the world size turns
            # that average into the sum over ranks of sum / global count.
            scaled = loss.mean(counts) * env.world_size
            (scaler.scale(scaled) if scaler else scaled).backward()
        step_loss += loss.mean(counts).detach()
        for term, (loss_sum, _) in loss.terms.items():
            term_losses[term] = term_losses.get(term, 0) + loss_sum.detach() / counts[term]
    reduced = distributed.all_reduce_sum({"loss": step_loss, **term_losses}, env)
    return float(reduced["loss"]), {k: float(v) for k, v in reduced.items() if k != "loss"}


def run_training(t: Training) -> LoopState:
    """Step `t` until its total steps or a stop request; returns the final loop state."""
    cfg, state = t.cfg, t.state
    t.model.backbone.checkpoint_blocks = cfg.activation_checkpointing
    compute_loss = forward_loss(t.train_model, t.objective, cfg.compile)
    log = MetricsLog(t.out, enable=t.env.is_main)
    log.truncate_after(state.step)
    bar = ProgressBar(state.total_steps, initial=state.step, enable=t.env.is_main)
    stop = StopRequest()
    generator = torch.Generator()
    throughput = Throughput()
    try:
        stopping = False
        while state.step < state.total_steps and not stopping:
            lr = cfg.lr * t.schedule(state.step)
            for group in t.optimizer.param_groups:
                group["lr"] = lr
            generator.manual_seed(step_seed(cfg.seed, t.env.rank, state.step))
            torch.manual_seed(step_seed(cfg.seed, t.env.rank, state.step) + 1)  # dropout
            micro_batches = t.data.micro_batches(state.step, generator)
            loss, terms = train_step(t.train_model, compute_loss, t.objective, micro_batches,
                                     t.env, cfg.precision, t.scaler)
            grad_norm = _unscaled_grad_norm(t)
            tokens = sum(batch.token_count() for batch in micro_batches) * t.env.world_size
            state.step += 1
            state.tokens += tokens
            state.data = t.data.state_dict()
            # One collective for both, so every rank takes the same branch and stops together.
            nonfinite, stopping = distributed.any_rank(
                (not (math.isfinite(loss) and math.isfinite(grad_norm)), stop.requested), t.env)
            if nonfinite:
                _skip_step(t, log, loss, save=stopping)
                continue
            state.nonfinite_streak = 0
            _optimizer_step(t)
            throughput.add(tokens)
            if t.deadline is not None:
                _keep_to_deadline(t, bar)
            if state.step % _log_every(t) == 0 or state.step == state.total_steps:
                _log_step(t, log, bar, throughput, loss=loss, lr=lr, grad_norm=grad_norm,
                          terms=terms)
            if _validate_and_save(t, log, stopping):
                break
    finally:
        stop.restore()
        bar.close()
        log.close()
    if t.env.is_main:
        log.plot(t.out / CURVES, t.scores, t.title)
    if stop.requested:
        if t.env.is_main:
            print(f"stopped at step {state.step}; checkpoint saved; continue with --resume")
        raise RunStopped(stop.signum)
    return state


class Throughput:
    """Tokens trained since the last log line, and the time they took."""

    def __init__(self) -> None:
        self.start, self.tokens = time.perf_counter(), 0

    def add(self, tokens: int) -> None:
        self.tokens += tokens

    def take(self) -> float:
        """Tokens per second since the last call, and start again."""
        rate = self.tokens / max(time.perf_counter() - self.start, 1e-9)
        self.start, self.tokens = time.perf_counter(), 0
        return rate


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


def _unscaled_grad_norm(t: Training) -> float:
    if t.scaler:
        t.scaler.unscale_(t.optimizer)
    norm = torch.nn.utils.clip_grad_norm_(t.model.parameters(), t.cfg.grad_clip)
    return float(norm.full_tensor() if distributed.is_sharded(t.model) else norm)


def _optimizer_step(t: Training) -> None:
    if t.scaler:
        t.scaler.step(t.optimizer)
        t.scaler.update()
    else:
        t.optimizer.step()
    t.optimizer.zero_grad(set_to_none=True)


def _skip_step(t: Training, log: MetricsLog, loss: float, save: bool) -> None:
    """A step whose loss or gradient was not finite changes nothing but the counters."""
    state = t.state
    t.optimizer.zero_grad(set_to_none=True)
    state.nonfinite_steps += 1
    state.nonfinite_streak += 1
    log.log("train", state.step, skipped_nonfinite=1, loss=loss)
    if state.nonfinite_streak >= t.cfg.max_nonfinite_steps:
        raise TrainingError(
            f"the loss was not finite for {state.nonfinite_streak} steps in a row "
            f"(up to step {state.step}); stopping. The last good checkpoint is "
            f"{_latest(t.out)}; try a lower --lr or --precision fp32")
    if save:
        save_training(t)


def _log_step(t: Training, log: MetricsLog, bar: ProgressBar, throughput: Throughput,
              loss: float, lr: float, grad_norm: float, terms: dict[str, float]) -> None:
    tokens_per_second = throughput.take()
    mfu = tokens_per_second * t.flops_per_token / t.peak_flops
    log.log("train", t.state.step, loss=loss, lr=lr, grad_norm=grad_norm, tokens=t.state.tokens,
            tokens_per_second=tokens_per_second, mfu=mfu,
            **{f"{k}_loss": v for k, v in terms.items()})
    bar.update(t.state.step, loss=loss, lr=lr, tokens_per_second=tokens_per_second)


def _validate_and_save(t: Training, log: MetricsLog, stopping: bool) -> bool:
    """Validate every `eval_every` steps and at the end; save on a new best, at the end, when
    stopping and every `checkpoint_every` steps. Returns whether to stop early: `patience`
    validations in a row without a new best."""
    state, cfg = t.state, t.cfg
    finished = state.step == state.total_steps
    improved = early_stop = False
    deadline_due = t.deadline is not None and distributed.from_rank_0(
        t.deadline.validation_due(), t.env)
    if state.step % cfg.eval_every == 0 or finished or deadline_due:
        started = time.perf_counter()
        metrics = t.validate()
        if t.deadline is not None:
            t.deadline.validated(started)
        log.log("eval", state.step, **metrics)
        improved = t.headline(metrics) < state.best_eval
        if improved:
            state.best_eval = t.headline(metrics)
            state.best_checkpoint = checkpoint_name(state.step)
        state.evals_since_best = 0 if improved else state.evals_since_best + 1
        early_stop = cfg.patience is not None and state.evals_since_best >= cfg.patience
        if early_stop and t.env.is_main:
            print(f"\nstopping early at step {state.step}: no better validation in "
                  f"{cfg.patience} evaluations")
    if improved or finished or stopping or early_stop or state.step % cfg.checkpoint_every == 0:
        save_training(t)
    return early_stop


def save_training(t: Training) -> None:
    """Rank 0 writes the checkpoint; under FSDP2 every rank gathers weights and writes its
    optimizer shard."""
    sharded = distributed.is_sharded(t.model)
    if not (t.env.is_main or sharded):
        return
    directory = t.out / CHECKPOINTS
    weights = distributed.full_weights(t.model)
    loop_state = {"loop": vars(t.state).copy()}
    metadata = {BEST: t.state.best_checkpoint}  # in the manifest: found without the state
    if sharded:
        save_checkpoint(directory, t.state.step, weights, loop_state, metadata,
                        shard=distributed.local_optimizer_state(t.optimizer), env=t.env)
    else:
        save_checkpoint(directory, t.state.step, weights,
                        {**loop_state, "optimizer": t.optimizer.state_dict()}, metadata)
    if t.env.is_main:
        best = t.state.best_checkpoint
        prune_checkpoints(directory, t.cfg.keep_last, {directory / best} if best else set())


def restore_loop_state(saved: dict, checkpoint: Path, model: nn.Module, optimizer,
                       env: distributed.Env) -> LoopState:
    """Optimizer and loop state from a checkpoint whose weights are loaded."""
    if distributed.is_sharded(model):
        distributed.load_local_optimizer_state(optimizer, load_optimizer_shard(checkpoint, env))
    elif "optimizer" in saved:
        optimizer.load_state_dict(saved["optimizer"])
    else:
        raise TrainingError(f"{checkpoint} was written by an FSDP run; resume it with "
                            "--distributed fsdp under torchrun with as many processes")
    return LoopState(**saved["loop"])


def _latest(out: Path) -> str:
    found = list_checkpoints(out / CHECKPOINTS)
    return str(found[-1]) if found else "none (no checkpoint was written yet)"
