"""`lmlab pretrain`: set up a pre-training run, then hand it to the one loop (loop.py)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from lmlab.config import ModelConfig
from lmlab.data.dataset import Dataset, open_or_prepare
from lmlab.data.loader import BlockBatches
from lmlab.data.special_tokens import SpecialTokens
from lmlab.model import LanguageModel
from lmlab.objectives.base import Objective
from lmlab.objectives.batch import Batch
from lmlab.objectives.documents import block_pad_id
from lmlab.objectives.registry import build_objective
from lmlab.presets import preset
from lmlab.runs.layout import prepare_run_dir, seen_from_run
from lmlab.train import distributed
from lmlab.train.budget import (
    DEADLINE_VALIDATIONS,
    Deadline,
    deadline_eval_batches,
    minutes_budget,
    step_budget,
    steps_in_minutes,
)
from lmlab.train.checkpoint import load_resume_checkpoint
from lmlab.train.config import EVAL_EVERY_STEPS, TrainConfig, resolve_config
from lmlab.train.evaluate import evaluation_objectives, headline_loss, validate
from lmlab.train.loop import (
    LoopState,
    Training,
    restore_loop_state,
    run_training,
)
from lmlab.train.optim import make_optimizer
from lmlab.train.precision import autocast, grad_scaler
from lmlab.train.resume import BUDGETS, resumed_config, trained_steps
from lmlab.train.schedule import Schedule
from lmlab.train.step import forward_loss
from lmlab.train.throughput import all_ranks_peak_flops, objective_flops_per_token

# A step's time over its timed forward and backward: optimizer, data and logging on top.
STEP_OVERHEAD = 1.15


def auto_family(objective: Objective) -> str:
    """BERT for objectives that only read bidirectionally (they cannot generate), else GPT-2."""
    return "gpt2" if objective.can_generate else "bert"


def preset_name(cfg: TrainConfig, objective: Objective) -> str:
    """The preset asked for; `auto` is the mini size of the objective's `auto_family`."""
    return f"{auto_family(objective)}-mini" if cfg.model == "auto" else cfg.model


def model_config(cfg: TrainConfig, objective: Objective, special: SpecialTokens) -> ModelConfig:
    return preset(preset_name(cfg, objective), special.vocab_size, cfg.seq_len,
                  **cfg.model_overrides)


def micro_batches_per_step(cfg: TrainConfig, env: distributed.Env) -> tuple[int, int]:
    """(rows per micro-batch, micro-batches per step) on each rank."""
    micro = cfg.micro_batch_size or cfg.batch_size // env.world_size
    if micro < 1 or cfg.batch_size % (micro * env.world_size):
        raise ValueError(f"batch_size {cfg.batch_size} is not a multiple of micro_batch_size "
                         f"{micro} × {env.world_size} ranks")
    return micro, cfg.batch_size // (micro * env.world_size)


class PretrainingData:
    """Micro-batches of packed blocks, each made into the objective's batch."""

    def __init__(self, blocks: BlockBatches, objective: Objective, accumulation: int,
                 num_workers: int) -> None:
        self.blocks, self.objective, self.accumulation = blocks, objective, accumulation
        self.stream = iter(DataLoader(blocks, batch_size=None, num_workers=num_workers))
        self.last = None

    def micro_batches(self, step: int, generator: torch.Generator) -> list[Batch]:
        batches = []
        for _ in range(self.accumulation):
            self.last = next(self.stream)
            batches.append(self.objective.make_batch(self.last.tokens, generator, step))
        return batches

    def state_dict(self) -> dict:
        return self.blocks.state_dict(self.last)


def packing(cfg: TrainConfig, objective: Objective) -> str:
    """The layout the objective needs (whole sentences for NSP), else the one asked for."""
    if objective.packing == "sentences":
        return "sentences"
    return "concatenate" if cfg.packing == "auto" else cfg.packing


def pretrain_with_settings(config: Path | None, fields: dict) -> Path:
    """Pre-train from a config file and/or fields by name; with no `data`, on the built-in
    corpus. Returns the run directory."""
    cfg = resolve_config(config, fields)
    return pretrain(cfg, open_or_prepare(cfg.data))


def pretrain(cfg: TrainConfig, dataset: Dataset) -> Path:
    """Pre-train as `cfg` says on `dataset`; returns the run directory."""
    env = distributed.setup()
    torch.manual_seed(cfg.seed)  # identical initial weights on every rank
    special = dataset.special
    objective = build_objective(cfg.objective, special, cfg.objective_options,
                                dataset.word_starts)
    model_cfg = model_config(cfg, objective, special)
    out = Path(cfg.out or f"runs/{cfg.objective.replace(':', '-')}")
    config = {"train": cfg.to_dict(), "model": model_cfg.to_dict(),
              "dataset": seen_from_run(out, dataset.path) if dataset.path else None}
    # Everything that can refuse the run does so before its directory is written.
    micro_size, accumulation = micro_batches_per_step(cfg, env)
    blocks = BlockBatches(dataset.train, cfg.seq_len, micro_size, packing(cfg, objective),
                          block_pad_id(special), special.sep, cfg.seed, env.rank, env.world_size)
    validation_blocks = BlockBatches(dataset.validation, cfg.seq_len, micro_size,
                                     packing(cfg, objective), block_pad_id(special), special.sep,
                                     seed=0, rank=env.rank, world_size=env.world_size)
    model = LanguageModel(model_cfg, heads=objective.heads).to(env.device)
    if cfg.resume:
        config = resumed_config(out, config)
        cfg = replace(cfg, **{name: config["train"][name] for name in BUDGETS})
        _refuse_a_passed_budget(cfg, model, trained_steps(out))  # before writing
    resume_from = (prepare_run_dir(out, config, cfg.resume, cfg.overwrite, dataset.tokenizer_json)
                   if env.is_main else None)
    resume_from = distributed.broadcast_path(resume_from, env)
    if cfg.resume and resume_from is None and env.is_main:
        print(f"{out} has no checkpoint yet: starting from step 0")
    # into the whole model, before sharding
    saved = load_resume_checkpoint(resume_from, model) if resume_from else None
    train_model = distributed.wrap(model, env, cfg.distributed)
    optimizer = make_optimizer(model, cfg.lr, cfg.weight_decay, betas=(0.9, cfg.beta2))
    state = LoopState()
    if saved is not None:
        state = restore_loop_state(saved, resume_from, model, optimizer, env)
    if state.data:
        blocks.load_state_dict(state.data)
    planned_steps = state.total_steps  # of the run resumed, if any
    state.total_steps = (_resumed_steps(cfg, model, state) if planned_steps else
                         distributed.from_rank_0(  # timed by each rank, rank 0's count for all
                             _total_steps(cfg, model, objective, special, micro_size,
                                          accumulation), env))
    objective = objective.for_run(state.total_steps)
    eval_objectives = evaluation_objectives(objective)
    deadline = None if saved is not None else _deadline(cfg, model)  # resumed: the last plan
    cfg = replace(cfg, eval_every=cfg.eval_every or EVAL_EVERY_STEPS)
    eval_count = _eval_count(cfg, deadline, state.total_steps * accumulation)
    eval_blocks = [validation_blocks.batch(i).tokens
                   for i in range(min(eval_count, validation_blocks.batches_per_epoch))]
    # the run's own warm-up, even when a resume lengthens it
    warmup = _warmup_steps(cfg, planned_steps or state.total_steps)
    training = Training(
        cfg=cfg, env=env, model=model, train_model=train_model, optimizer=optimizer,
        scaler=grad_scaler(cfg.precision, env.device), objective=objective,
        data=PretrainingData(blocks, objective, accumulation, cfg.num_workers),
        schedule=Schedule(cfg.schedule, state.total_steps, warmup, cfg.lr_floor),
        validate=lambda: validate(model, eval_objectives, eval_blocks, dataset.bytes_per_token,
                                  env, cfg.precision),
        headline=headline_loss, out=out, state=state,
        flops_per_token=objective_flops_per_token(model_cfg, cfg.seq_len, objective,
                                                  micro_size),
        peak_flops=all_ranks_peak_flops(cfg.precision, env), deadline=deadline,
        title=f"{preset_name(cfg, objective)} pre-trained with {cfg.objective}")
    run_training(training)
    distributed.teardown()
    return out


def _eval_count(cfg: TrainConfig, deadline: Deadline | None, micro_batches: int) -> int:
    if deadline is not None and deadline.validations:
        return deadline_eval_batches(micro_batches, cfg.eval_batches)
    return cfg.eval_batches


def _total_steps(cfg: TrainConfig, model: LanguageModel, objective: Objective,
                 special: SpecialTokens, micro_size: int, accumulation: int) -> int:
    steps = _step_cap(cfg, model)
    minutes = minutes_budget(cfg.minutes, steps)
    if minutes is None:
        return steps
    # One timing, though it pays for warming up: the run's Deadline corrects the estimate.
    (timing,) = step_seconds(model, objective, special, micro_size, cfg.seq_len, cfg.precision,
                             runs=1)
    timed = steps_in_minutes(minutes, accumulation * timing)
    return min(steps, timed) if steps else timed


def _resumed_steps(cfg: TrainConfig, model: LanguageModel, state: LoopState) -> int:
    """The length of a resumed run: its step or token budget, which may have grown since its
    start (the schedule stretches to it); a time budget keeps the plan made at its start. Read
    from the budget, not from what config.json says changed, so a resume that was cut short
    after writing config.json still grows the run when given again."""
    steps = _step_cap(cfg, model)
    return state.total_steps if minutes_budget(cfg.minutes, steps) is not None else steps


def _refuse_a_passed_budget(cfg: TrainConfig, model: LanguageModel, trained: int) -> None:
    """Refuse a step or token budget below the `trained` steps of the run resumed (a budget
    equal to them ends the run there)."""
    steps = _step_cap(cfg, model)
    if minutes_budget(cfg.minutes, steps) is None and steps < trained:
        raise ValueError(f"the run has trained {trained} steps; a budget of {steps} steps "
                         "gives it nothing more to do — give a larger --steps or --tokens")


def _warmup_steps(cfg: TrainConfig, planned_steps: int) -> int:
    if cfg.warmup_steps is not None:
        return cfg.warmup_steps
    return min(1000, planned_steps // 20)


def _step_cap(cfg: TrainConfig, model: LanguageModel) -> int | None:
    return step_budget(cfg.steps, cfg.tokens, model.num_parameters(),
                       cfg.batch_size * cfg.seq_len)


def _deadline(cfg: TrainConfig, model: LanguageModel) -> Deadline | None:
    """The time budget the loop keeps to; None for step and token budgets. Unless told how
    often to validate, a time-budgeted run validates DEADLINE_VALIDATIONS times, so that even
    a short run plots a curve."""
    cap = _step_cap(cfg, model)
    minutes = minutes_budget(cfg.minutes, cap)
    if minutes is None:
        return None
    spread = cfg.eval_every is None
    return Deadline(minutes, cap, DEADLINE_VALIDATIONS if spread else 0)


def step_seconds(model: LanguageModel, objective: Objective, special: SpecialTokens, rows: int,
                 seq_len: int, precision: str, runs: int) -> Iterator[float]:
    """Time `runs` forward and backward passes of one (rows, seq_len) micro-batch of random
    tokens as training runs them (the objective's own batch and loss, so a sparse MLM head is
    timed as sparse); each time is scaled by STEP_OVERHEAD for the rest of a step. Weights do
    not change."""
    device = next(model.parameters()).device
    generator = torch.Generator().manual_seed(0)
    ordinary = special.ordinary_ids()
    ids = ordinary[torch.randint(len(ordinary), (rows, seq_len), generator=generator)]
    compute_loss = forward_loss(model, objective, compile_model=False)
    for _ in range(runs):
        start = time.perf_counter()
        batch = objective.make_batch(ids, generator).to(device)
        with autocast(precision, device):
            compute_loss(batch).mean().backward()
        if device.type == "cuda":  # kernels run asynchronously: wait for them
            torch.cuda.synchronize(device)
        yield (time.perf_counter() - start) * STEP_OVERHEAD
    model.zero_grad(set_to_none=True)
