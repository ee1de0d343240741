"""`lmlab pretrain`: the one training loop, top to bottom in execution order."""

from __future__ import annotations

import math
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from lmlab.config import ModelConfig
from lmlab.data.dataset import Dataset
from lmlab.data.loader import BlockBatches
from lmlab.model import LanguageModel
from lmlab.objectives.base import LossSum, Objective, SpecialTokens
from lmlab.objectives.registry import ObjectiveOptions, build_objective
from lmlab.presets import preset
from lmlab.train import distributed
from lmlab.train.budget import DEFAULT_MINUTES, step_budget, steps_in_minutes
from lmlab.train.checkpoint import (
    checkpoint_name,
    list_checkpoints,
    load_checkpoint,
    load_optimizer_shard,
    prune_checkpoints,
    save_checkpoint,
)
from lmlab.train.config import TrainConfig
from lmlab.train.evaluate import evaluate, evaluation_objectives, headline_loss
from lmlab.train.metrics import MetricsLog, ProgressBar
from lmlab.train.optim import make_optimizer
from lmlab.train.precision import autocast, grad_scaler
from lmlab.train.run_dir import prepare_run_dir
from lmlab.train.schedule import Schedule
from lmlab.train.throughput import device_peak_flops, flops_per_token

MASKED_OBJECTIVES = ("mlm", "mlm+nsp", "mntp")
PRECISION_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
# A step's time over its timed forward and backward: optimizer, data and logging on top.
STEP_OVERHEAD = 1.15


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
    data: dict = field(default_factory=dict)


def model_config(cfg: TrainConfig, dataset: Dataset) -> ModelConfig:
    name = cfg.model
    if name == "auto":
        name = "bert-mini" if cfg.objective in MASKED_OBJECTIVES else "gpt2-mini"
    return preset(name, dataset.special.vocab_size, cfg.seq_len, **cfg.model_overrides)


def step_seed(seed: int, rank: int, step: int) -> int:
    """Randomness is re-derived at every step, so a resumed run needs no RNG state."""
    return ((seed * 1_000_003 + rank) * 1_000_003 + step) % (2**63)


def micro_batches_per_step(cfg: TrainConfig, env: distributed.Env) -> tuple[int, int]:
    micro = cfg.micro_batch_size or cfg.batch_size // env.world_size
    if micro < 1 or cfg.batch_size % (micro * env.world_size):
        raise ValueError(f"batch_size {cfg.batch_size} is not a multiple of micro_batch_size "
                         f"{micro} × {env.world_size} ranks")
    return micro, cfg.batch_size // (micro * env.world_size)


class StopRequest:
    """SIGINT / SIGTERM end the run after the current step, with a checkpoint."""

    def __init__(self) -> None:
        self.requested = False
        self.previous = {s: signal.signal(s, self._handle) for s in (signal.SIGINT,
                                                                     signal.SIGTERM)}

    def _handle(self, signum, frame) -> None:
        self.requested = True

    def restore(self) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)


def forward_loss(model, objective: Objective, compile_model: bool):
    """batch → LossSum. Vocabulary heads hand their features to the fused, chunked
    projection + cross-entropy (lmlab/model/linear_cross_entropy.py), so full logits are never
    materialised. Compiled, the model is one graph and that loss stays eager: as fast as
    inductor's own fusion of projection and log-softmax (measured, bf16 on 2 cores), and it
    never holds the logits."""

    def run(batch) -> LossSum:
        outputs = model(**batch.model_inputs(), unprojected=True)
        return objective.loss(outputs, batch)

    return torch.compile(run) if compile_model else run


def train_step(model, compute_loss, objective: Objective, micro_batches, env, cfg, scaler):
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
        with distributed.gradient_sync(model, enabled=last), autocast(cfg.precision, env.device):
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


def pretrain(cfg: TrainConfig, dataset: Dataset) -> Path:
    env = distributed.setup()
    torch.manual_seed(cfg.seed)  # identical initial weights on every rank
    model_cfg = model_config(cfg, dataset)
    out = Path(cfg.out or f"runs/{cfg.objective.replace(':', '-')}")
    config = {"train": cfg.to_dict(), "model": model_cfg.to_dict(),
              "dataset": str(dataset.path)}
    resume_from = prepare_run_dir(out, config, cfg.resume, cfg.overwrite) if env.is_main else None
    resume_from = _broadcast_path(resume_from, out, env)
    if dataset.tokenizer_json and env.is_main:
        (out / "tokenizer.json").write_text(dataset.tokenizer_json)

    micro_size, accumulation = micro_batches_per_step(cfg, env)
    tokens_per_step = cfg.batch_size * cfg.seq_len
    state = LoopState()
    objective_options = ObjectiveOptions(
        mlm_rate=cfg.mlm_rate, mlm_rate_start=cfg.mlm_rate_start, mask_prob=cfg.mask_prob,
        random_prob=cfg.random_prob, mlm_selection=cfg.mlm_selection,
        whole_word=cfg.whole_word, span_noise_density=cfg.span_noise_density,
        span_mean_length=cfg.span_mean_length)
    model = LanguageModel(model_cfg, heads=_heads_of(cfg, dataset, objective_options))
    model.to(env.device)
    saved = load_checkpoint(resume_from, model) if resume_from is not None else None
    train_model = distributed.wrap(model, env, cfg.distributed)
    sharded = distributed.is_sharded(model)
    optimizer = make_optimizer(model, cfg.lr, cfg.weight_decay, betas=(0.9, cfg.beta2))
    if saved is not None:
        if sharded:
            distributed.load_local_optimizer_state(optimizer,
                                                   load_optimizer_shard(resume_from, env))
        elif "optimizer" in saved:
            optimizer.load_state_dict(saved["optimizer"])
        else:
            raise TrainingError(f"{resume_from} was written by an FSDP run; resume it with "
                                "--distributed fsdp under torchrun with as many processes")
        state = LoopState(**saved["loop"])
    packing = _packing(cfg)
    batches = BlockBatches(dataset.train, cfg.seq_len, micro_size, packing,
                           dataset.special.pad, dataset.special.sep, cfg.seed, env.rank,
                           env.world_size)
    if state.data:
        batches.load_state_dict(state.data)
    scaler = grad_scaler(cfg.precision, env.device)
    data = iter(DataLoader(batches, batch_size=None, num_workers=cfg.num_workers))

    if not state.total_steps:
        timing_objective = build_objective(cfg.objective, dataset.special, objective_options,
                                           dataset.word_starts)
        # Ranks time their own steps; rank 0's count holds for all, or they would part ways.
        state.total_steps = _from_rank_0(
            _total_steps(cfg, model, timing_objective, dataset.special, tokens_per_step,
                         micro_size, accumulation), env)
    objective = build_objective(cfg.objective, dataset.special, objective_options,
                                dataset.word_starts, state.total_steps)
    compute_loss = forward_loss(train_model, objective, cfg.compile)
    warmup = cfg.warmup_steps
    if warmup is None:
        warmup = min(1000, state.total_steps // 20)
    schedule = Schedule(cfg.schedule, state.total_steps, warmup, cfg.lr_floor)
    eval_objectives = evaluation_objectives(objective)
    eval_blocks = _eval_blocks(cfg, dataset, micro_size, env)

    predicted_fraction = cfg.mlm_rate if cfg.objective in MASKED_OBJECTIVES else 1.0
    train_flops_per_token = flops_per_token(model_cfg, cfg.seq_len, predicted_fraction)
    # Rank 0 probes alone (ranks probing at once would share the cores and read low).
    peak = device_peak_flops(env.device, PRECISION_DTYPES[cfg.precision]) if env.is_main else 0.0
    peak_flops = _from_rank_0(peak, env) * env.world_size
    log = MetricsLog(out, enable=env.is_main)
    log.truncate_after(state.step)
    bar = ProgressBar(state.total_steps, initial=state.step, enable=env.is_main)
    stop = StopRequest()
    generator = torch.Generator()
    last_batch = None
    interval_start, interval_tokens = time.perf_counter(), 0
    try:
        stopping = False
        while state.step < state.total_steps and not stopping:
            step = state.step
            lr = cfg.lr * schedule(step)
            for group in optimizer.param_groups:
                group["lr"] = lr
            generator.manual_seed(step_seed(cfg.seed, env.rank, step))
            torch.manual_seed(step_seed(cfg.seed, env.rank, step) + 1)  # dropout
            micro_batches = []
            for _ in range(accumulation):
                last_batch = next(data)
                micro_batches.append(objective.make_batch(last_batch.tokens, generator, step))
            loss, terms = train_step(train_model, compute_loss, objective, micro_batches, env,
                                     cfg, scaler)
            if scaler:
                scaler.unscale_(optimizer)
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            grad_norm = float(grad_norm.full_tensor() if sharded else grad_norm)
            state.step += 1
            state.tokens += tokens_per_step
            state.data = batches.state_dict(last_batch)
            # One collective for both, so every rank takes the same branch and stops together.
            nonfinite, stopping = distributed.any_rank(
                (not (math.isfinite(loss) and math.isfinite(grad_norm)), stop.requested), env)
            if nonfinite:
                optimizer.zero_grad(set_to_none=True)
                state.nonfinite_steps += 1
                state.nonfinite_streak += 1
                log.log("train", state.step, skipped_nonfinite=1, loss=loss)
                if state.nonfinite_streak >= cfg.max_nonfinite_steps:
                    raise TrainingError(
                        f"the loss was not finite for {state.nonfinite_streak} steps in a row "
                        f"(up to step {state.step}); stopping. The last good checkpoint is "
                        f"{_latest(out)}; try a lower --lr or --precision fp32")
                if stopping:
                    _save(out, model, optimizer, state, cfg, env)
                continue
            state.nonfinite_streak = 0
            if scaler:
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            interval_tokens += tokens_per_step

            if state.step % cfg.log_every == 0 or state.step == state.total_steps:
                elapsed = time.perf_counter() - interval_start
                tokens_per_second = interval_tokens / max(elapsed, 1e-9)
                mfu = tokens_per_second * train_flops_per_token / peak_flops
                log.log("train", state.step, loss=loss, lr=lr, grad_norm=grad_norm,
                        tokens=state.tokens, tokens_per_second=tokens_per_second, mfu=mfu,
                        **{f"{k}_loss": v for k, v in terms.items()})
                bar.update(state.step, loss=loss, lr=lr, tokens_per_second=tokens_per_second)
                interval_start, interval_tokens = time.perf_counter(), 0
            finished = state.step == state.total_steps
            improved = False
            if state.step % cfg.eval_every == 0 or finished:
                metrics = evaluate(model, eval_objectives, eval_blocks,
                                   dataset.bytes_per_token, env, cfg.precision)
                log.log("eval", state.step, **metrics)
                improved = headline_loss(metrics) < state.best_eval
                if improved:
                    state.best_eval = headline_loss(metrics)
                    state.best_checkpoint = checkpoint_name(state.step)
            if improved or finished or stopping or state.step % cfg.checkpoint_every == 0:
                _save(out, model, optimizer, state, cfg, env)
    finally:
        stop.restore()
        bar.close()
        log.close()
    if env.is_main:
        log.plot(out / "curves.png")
    if stop.requested and env.is_main:
        print(f"stopped at step {state.step}; checkpoint saved; continue with --resume")
    distributed.teardown()
    return out


def _save(out, model, optimizer, state, cfg, env) -> None:
    """Rank 0 writes the checkpoint; under FSDP2 every rank gathers weights and writes its
    optimizer shard."""
    sharded = distributed.is_sharded(model)
    if not (env.is_main or sharded):
        return
    directory = out / "checkpoints"
    weights = distributed.full_weights(model)
    loop_state = {"loop": vars(state).copy()}
    if sharded:
        save_checkpoint(directory, state.step, weights, loop_state,
                        shard=distributed.local_optimizer_state(optimizer), env=env)
    else:
        save_checkpoint(directory, state.step, weights,
                        {**loop_state, "optimizer": optimizer.state_dict()})
    if env.is_main:
        keep = {directory / state.best_checkpoint} if state.best_checkpoint else set()
        prune_checkpoints(directory, cfg.keep_last, keep)


def _latest(out: Path) -> str:
    found = list_checkpoints(out / "checkpoints")
    return str(found[-1]) if found else "none (no checkpoint was written yet)"


def _broadcast_path(path: Path | None, out: Path, env) -> Path | None:
    holder = _from_rank_0(str(path) if path else "", env)
    return Path(holder) if holder else None


def _from_rank_0(value, env):
    """Rank 0's `value` on every rank (a picklable object)."""
    if not env.distributed:
        return value
    holder = [value]
    torch.distributed.broadcast_object_list(holder, src=0)
    return holder[0]


def _heads_of(cfg: TrainConfig, dataset: Dataset, options: ObjectiveOptions) -> tuple:
    return build_objective(cfg.objective, dataset.special, options, dataset.word_starts).heads


def _packing(cfg: TrainConfig) -> str:
    if cfg.objective == "mlm+nsp":
        return "sentences"
    return "concatenate" if cfg.packing == "auto" else cfg.packing


def _eval_blocks(cfg: TrainConfig, dataset: Dataset, micro_size: int, env) -> list:
    batches = BlockBatches(dataset.validation, cfg.seq_len, micro_size, _packing(cfg),
                           dataset.special.pad, dataset.special.sep, seed=0, rank=env.rank,
                           world_size=env.world_size)
    count = min(cfg.eval_batches, batches.batches_per_epoch)
    return [batches.batch(i).tokens for i in range(count)]


def _total_steps(cfg: TrainConfig, model: LanguageModel, objective: Objective,
                 special: SpecialTokens, tokens_per_step: int, micro_size: int,
                 accumulation: int) -> int:
    steps = step_budget(cfg.steps, cfg.tokens, model.num_parameters(), tokens_per_step)
    minutes = cfg.minutes if cfg.minutes is not None else (None if steps else DEFAULT_MINUTES)
    if minutes is None:
        return steps
    seconds = accumulation * _seconds_per_micro_batch(cfg, model, objective, special, micro_size)
    timed = steps_in_minutes(minutes, seconds)
    return min(steps, timed) if steps else timed


def _seconds_per_micro_batch(cfg: TrainConfig, model: LanguageModel, objective: Objective,
                             special: SpecialTokens, rows: int) -> float:
    """Time one micro-batch's forward and backward as training runs them (the objective's own
    batch and loss, so a sparse MLM head is timed as sparse); weights do not change."""
    device = next(model.parameters()).device
    generator = torch.Generator().manual_seed(0)
    ordinary = special.ordinary_ids()
    ids = ordinary[torch.randint(len(ordinary), (rows, cfg.seq_len), generator=generator)]
    compute_loss = forward_loss(model, objective, compile_model=False)
    timings = []
    for _ in range(2):
        start = time.perf_counter()
        batch = objective.make_batch(ids, generator).to(device)
        with autocast(cfg.precision, device):
            compute_loss(batch).mean().backward()
        timings.append(time.perf_counter() - start)
    model.zero_grad(set_to_none=True)
    return min(timings) * STEP_OVERHEAD
