"""One optimizer step's device work, queued without waiting on it: forward and backward over
the micro-batches, gradient clipping, the non-finite guard and the update. Nothing here reads a
value back to the host, so on a GPU the host goes on queueing the next step while this one
runs; the loop reads losses and counters back at its log, validation and checkpoint steps."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from lmlab.data.special_tokens import SpecialTokens
from lmlab.kernels import attention
from lmlab.kernels.linear_cross_entropy import whole_logits_fit
from lmlab.kernels.precision import autocast
from lmlab.model import LanguageModel
from lmlab.objectives.base import Objective
from lmlab.objectives.batch import Batch, to_device
from lmlab.objectives.losses import LossSum
from lmlab.train import distributed
from lmlab.train.optim import Optimizers


@dataclass
class StepResult:
    """A step's figures, still on the device."""

    loss: Tensor
    terms: dict[str, Tensor]  # each loss term's mean
    grad_norm: Tensor  # before clipping
    skipped: Tensor  # 1.0 when the step was skipped as not finite: nothing changed


def forward_loss(model, objective, compile_model: bool, one_graph: bool | None = None):
    """batch → LossSum, in one of two forms.

    Chunked (the CPU's, and the default off CUDA): vocabulary heads hand their features to the
    fused, chunked projection + cross-entropy (lmlab/kernels/linear_cross_entropy.py), so full
    logits are never materialised; compiled, the model is one graph and the loss stays eager
    (as fast as inductor's own fusion of projection and log-softmax, measured, bf16 on 2
    cores). One graph (`one_graph`; by default compiled on CUDA, one GPU or DDP's ranks): the
    heads' logits in one product and a plain cross-entropy, compiled with the model into one
    graph, wherever the logits fit the device's free memory (`whole_logits_fit`), else chunked.

    Compiled, batches take the form of `compiled_form`, so that one graph serves them all."""
    inner = getattr(model, "module", model)  # under DDP, the model it wraps
    device = next(inner.parameters()).device
    if one_graph is None:
        one_graph = compile_model and device.type == "cuda"
    forward = torch.compile(model) if compile_model else model

    def chunked(batch) -> LossSum:
        return objective.loss(objective.outputs(forward, batch, unprojected=True), batch)

    def whole(batch) -> LossSum:
        return objective.loss(objective.outputs(model, batch), batch)

    whole_graph = torch.compile(whole) if compile_model and one_graph else whole
    fits: dict[int, bool] = {}  # by rows: free memory is read once per shape

    def run(batch) -> LossSum:
        if compile_model:
            batch = compiled_form(batch, objective, device)
        rows = batch.input_ids.numel()
        if one_graph and rows not in fits:
            fits[rows] = whole_logits_fit(rows, inner.cfg.vocab_size, device)
        return whole_graph(batch) if one_graph and fits[rows] else chunked(batch)

    return run


def compiled_form(batch: Batch, objective, device: torch.device) -> Batch:
    """The batch as a compiled step takes it, so that one graph serves every batch: each
    head's positions padded to the objective's `target_bound`, and where attention runs on
    FlexAttention, the block mask built here, once per batch, outside the graph."""
    rows, length = batch.input_ids.shape
    bound = objective.target_bound(rows, length) if isinstance(objective, Objective) else None
    if bound is not None:
        batch = batch.with_positions_padded(bound)
    if device.type in attention.FLEX_DEVICES and batch.mask.needs_mask(length, length):
        batch = replace(batch, mask=batch.mask.with_block_mask(length))
    return batch


def train_step(model, compute_loss, objective, micro_batches, env, precision,
               scaler) -> tuple[Tensor, dict[str, Tensor]]:
    """Forward and backward over a step's micro-batches; the loss is normalised by the
    global target count of each term. Returns the step's loss and per-term losses."""
    counts = {}
    for batch in micro_batches:
        for term, count in objective.target_counts(batch).items():
            counts[term] = counts.get(term, 0) + count
    counts = distributed.all_reduce_sum(
        {k: to_device(torch.as_tensor(v), env.device) for k, v in counts.items()}, env)
    counts = {k: v.float() for k, v in counts.items()}
    step_loss = torch.zeros((), device=env.device)
    term_losses: dict[str, Tensor] = {}
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
    return reduced.pop("loss"), reduced


def clipped_grad_norm(model, optimizer, scaler, max_norm: float) -> Tensor:
    """The gradients' global norm before clipping them to `max_norm` (of the unscaled
    gradients under a loss scaler)."""
    if scaler:
        scaler.unscale_(optimizer)
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    return norm.full_tensor() if distributed.is_sharded(model) else norm


def guarded_update(optimizer, scaler, skip: Tensor) -> None:
    """Update the weights unless `skip` (a 0-d bool tensor) is true, then clear gradients."""
    if scaler:
        # fp16: the scaler skips a step whose gradients overflowed (a non-finite loss has
        # non-finite gradients) and lowers its scale.
        scaler.step(optimizer)
        scaler.update()
    else:
        for part in optimizer.parts if isinstance(optimizer, Optimizers) else (optimizer,):
            _step_unless(part, skip)
    optimizer.zero_grad(set_to_none=True)


def _step_unless(optimizer: torch.optim.Optimizer, skip: Tensor) -> None:
    if optimizer.defaults.get("fused") or getattr(optimizer, "reads_found_inf", False):
        # Fused kernels read `found_inf` on the device, as a gradient scaler hands it to them,
        # and leave weights, moments and step count untouched when it is 1.
        optimizer.found_inf, optimizer.grad_scale = skip.float(), None
        try:
            optimizer.step()
        finally:
            del optimizer.found_inf, optimizer.grad_scale
    elif not bool(skip):  # another optimizer: the host has to look
        optimizer.step()


class SkippedSteps:
    """Steps skipped for a non-finite loss or gradient, counted on the device and read back
    when the loop asks (log, validation and checkpoint steps)."""

    def __init__(self, streak: int, device: torch.device) -> None:
        self._new = torch.zeros((), device=device)
        self._streak = torch.full((), float(streak), device=device)
        self._longest = self._streak.clone()  # the longest streak since the last read
        self._unlogged = 0  # read back, not yet in a log line

    def add(self, skipped: Tensor) -> None:
        self._new += skipped
        self._streak = (self._streak + skipped) * skipped
        self._longest = torch.maximum(self._longest, self._streak)

    def read(self) -> tuple[int, int, int]:
        """(steps skipped since the last read, the current streak, the longest streak since
        the last read)."""
        new, streak, longest = (int(v) for v in torch.stack(
            [self._new, self._streak, self._longest]).tolist())
        self._new.zero_()
        self._longest = self._streak.clone()
        self._unlogged += new
        return new, streak, longest

    def take_unlogged(self) -> int:
        """Steps read back since the last call, for a log line."""
        count, self._unlogged = self._unlogged, 0
        return count


# A step's time over its timed forward and backward: optimizer, data and logging on top.
STEP_OVERHEAD = 1.15


def step_seconds(model: LanguageModel, objective: Objective, special: SpecialTokens, rows: int,
                 seq_len: int, precision: str, runs: int) -> Iterator[float]:
    """Time `runs` forward and backward passes of one (rows, seq_len) micro-batch of random
    tokens as training runs them (the objective's own batch and loss, so a sparse MLM head is
    timed as sparse); each time is scaled by STEP_OVERHEAD for the rest of a step. Weights do
    not change."""
    generator = torch.Generator().manual_seed(0)
    ordinary = special.ordinary_ids()
    ids = ordinary[torch.randint(len(ordinary), (rows, seq_len), generator=generator)]
    return batches_seconds(model, objective, lambda: [objective.make_batch(ids, generator)],
                           precision, runs)


def one_step_seconds(model: LanguageModel, objective: Objective, special: SpecialTokens,
                     rows: int, seq_len: int, precision: str) -> float:
    """step_seconds, timed once (warm-up included)."""
    (seconds,) = step_seconds(model, objective, special, rows, seq_len, precision, runs=1)
    return seconds


def batches_seconds(model: LanguageModel, objective, make_batches: Callable[[], list[Batch]],
                    precision: str, runs: int) -> Iterator[float]:
    """Time `runs` forward and backward passes of the micro-batches `make_batches` makes
    (making them included), as training runs them; each time is scaled by STEP_OVERHEAD for
    the rest of a step. Weights do not change."""
    device = next(model.parameters()).device
    compute_loss = forward_loss(model, objective, compile_model=False)
    for _ in range(runs):
        start = time.perf_counter()
        for batch in make_batches():
            with autocast(precision, device):
                compute_loss(batch.to(device)).mean().backward()
        if device.type == "cuda":  # kernels run asynchronously: wait for them
            torch.cuda.synchronize(device)
        yield (time.perf_counter() - start) * STEP_OVERHEAD
    model.zero_grad(set_to_none=True)


def first_step_seconds(model: LanguageModel, objective, data, precision: str) -> float:
    """The time of a run's first step on `data` (its step data: warm-up included)."""
    (seconds,) = batches_seconds(model, objective,
                                 lambda: data.micro_batches(0, torch.Generator()), precision,
                                 runs=1)
    return seconds
