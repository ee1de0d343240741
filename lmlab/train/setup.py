"""The setup pre-training and fine-tuning share, in the order it must run: the processes and
the seed, the micro-batch split, the run directory (a resumed run's settings, refusals before
anything is written), the resume point loaded into the whole model, the wrap for DDP or FSDP2,
the optimizer and the loop state. Each caller adds only what is its own (data, schedule,
validation) and hands the result to the one loop."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from lmlab.model import LanguageModel
from lmlab.runs.layout import prepare_run_dir
from lmlab.runs.schema import RunConfig
from lmlab.train import distributed
from lmlab.train.checkpoint import load_resume_checkpoint
from lmlab.train.config import LoopConfig
from lmlab.train.loop import LoopState, restore_loop_state
from lmlab.train.optim import make_optimizer
from lmlab.train.resume import BUDGETS, resumed_config
from lmlab.train.trackers import require_trackers


def begin(seed: int) -> distributed.Env:
    """The processes of the run, and the seed every rank starts from (so new weights are the
    same on every rank)."""
    env = distributed.setup()
    torch.manual_seed(seed)
    return env


def micro_batches_per_step(cfg: LoopConfig, env: distributed.Env) -> tuple[int, int]:
    """(rows per micro-batch, micro-batches per step) on each rank."""
    micro = cfg.micro_batch_size or cfg.batch_size // env.world_size
    if micro < 1 or cfg.batch_size % (micro * env.world_size):
        raise ValueError(f"batch_size {cfg.batch_size} is not a multiple of micro_batch_size "
                         f"{micro} × {env.world_size} ranks")
    return micro, cfg.batch_size // (micro * env.world_size)


@dataclass
class Started:
    """A run ready for its loop: the run directory's config (a resumed run's, with its
    recorded changes), the model wrapped for its ranks, the optimizer and the loop state
    (restored when resuming; `resumed` says so)."""

    config: RunConfig
    train_model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    state: LoopState
    resumed: bool


def start(cfg: LoopConfig, env: distributed.Env, out: Path, config: RunConfig,
          model: LanguageModel, tokenizer_json: str | None,
          budgets: tuple[str, ...] = BUDGETS,
          before_writing: Callable[[RunConfig], None] | None = None) -> Started:
    """Open the run directory `out` for `config` and make `model` (on its device, unwrapped)
    ready to train. `budgets` are the config fields a resume may lengthen; `before_writing`
    sees the config the run will have and may refuse it before anything is written."""
    require_trackers(cfg.report_to)
    if cfg.resume:
        config = resumed_config(out, config, budgets)
    if before_writing is not None:
        before_writing(config)
    resume_from = (prepare_run_dir(out, config, cfg.resume, cfg.overwrite, tokenizer_json)
                   if env.is_main else None)
    resume_from = distributed.broadcast_path(resume_from, env)
    if cfg.resume and resume_from is None and env.is_main:
        print(f"{out} has no checkpoint yet: starting from step 0")
    # into the whole model, before sharding
    saved = load_resume_checkpoint(resume_from, model) if resume_from else None
    train_model = distributed.wrap(model, env, cfg.distributed)
    optimizer = make_optimizer(model, cfg.lr, cfg.weight_decay, betas=(0.9, cfg.beta2),
                               name=cfg.optimizer_name,
                               embedding_lr_scale=cfg.embedding_rate_scale)
    state = LoopState()
    if saved is not None:
        state = restore_loop_state(saved, resume_from, model, optimizer, env)
    return Started(config, train_model, optimizer, state, saved is not None)
