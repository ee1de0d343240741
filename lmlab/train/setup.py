"""The setup pre-training and fine-tuning share, in the order it must run: the processes and
the seed, the run directory opened (new, resumed, overwritten or finished: one answer each,
lmlab/runs/opening.py, before anything is planned), the micro-batch split, the directory
written (a resumed run's settings, refusals before anything is written), the resume point
loaded into the whole model, the wrap for DDP or FSDP2, the optimizer and the loop state, and
the run's length under a time budget (the steps planned from a timed step, and the Deadline
that re-estimates them as steps come). Each caller adds only what is its own (data, schedule,
validation) and hands the result to the one loop."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from lmlab.config.budget import BUDGETS, DEADLINE_VALIDATIONS, steps_in_minutes
from lmlab.config.training import C, LoopConfig, muon_runs_with
from lmlab.kernels.device_defaults import (
    Choice,
    allow_tf32,
    compile_for,
    device_facts,
    precision_for,
)
from lmlab.kernels.precision import grad_scaler
from lmlab.model import LanguageModel
from lmlab.runs.opening import Opening, open_run_dir, prepare_run_dir
from lmlab.runs.resume import resumed_config, trained_optimizer
from lmlab.runs.schema import RunConfig
from lmlab.train import distributed
from lmlab.train.checkpoint import LoopState, load_resume_checkpoint, restore_loop_state
from lmlab.train.deadline import Deadline
from lmlab.train.flops import all_ranks_peak_flops
from lmlab.train.loop import Training
from lmlab.train.optim import optimizer_for


def begin(seed: int) -> distributed.Env:
    """The processes of the run, and the seed every rank starts from (so new weights are the
    same on every rank)."""
    env = distributed.setup()
    torch.manual_seed(seed)
    return env


def open_run(cfg: LoopConfig, env: distributed.Env, out: Path,
             budgets: tuple[str, ...] = BUDGETS, tokenizer_json: str | None = None) -> Opening:
    """How the run directory `out` opens for `cfg` (lmlab/runs/opening.py), decided on rank 0
    for every rank before anything is planned or written; a finished run is said so, and its
    setup then trains nothing. `budgets` are the fields a resume may lengthen; `tokenizer_json`
    the tokenizer of the data the command would train on, if it brings one."""
    opening = distributed.from_rank_0(
        open_run_dir(out, cfg.to_dict(), cfg.resume, cfg.overwrite, budgets, tokenizer_json)
        if env.is_main else None, env)
    if opening.kind == "finished" and env.is_main:
        print(opening.finished_line(budgets))
    return opening


def resolve(cfg: C, env: distributed.Env, opening: Opening,
            reads_only_bidirectionally: bool = False) -> C:
    """The concrete config the run `opening` opened trains with (LoopConfig.concrete),
    resolved once: --precision and --compile on the run's device (auto: bf16 and compiled on a
    GPU with bf16 tensor cores, fp32 and eager on the CPU), said in the run's first lines, and
    --optimizer (auto_optimizer; `reads_only_bidirectionally`: the pre-training objective's).
    A resumed run left at auto keeps the precision and optimizer it was trained with. TF32 is
    allowed for fp32 products on CUDA."""
    facts = device_facts(env.device)
    precision = precision_for(cfg.precision, facts)
    saved = opening.saved.train if opening.resumed else {}
    if cfg.precision == "auto" and saved.get("precision") is not None:
        precision = Choice(saved["precision"], "as the run resumed was trained")
    compiled = compile_for(cfg.compile, facts)
    tf32 = allow_tf32(env.device)
    if env.is_main:
        print(f"precision {precision.value}: {precision.reason}")
        print(f"compile {'on' if compiled.value else 'off'}: {compiled.reason}"
              + ("; TF32 allowed for fp32 products" if tf32 else ""))
    optimizer = cfg.optimizer
    if optimizer == "auto":
        optimizer = trained_optimizer(saved) or auto_optimizer(
            muon_runs_with(cfg.distributed, precision.value), reads_only_bidirectionally)
    if cfg.lr is None and saved.get("lr") is not None:  # a resume keeps the rate it had
        cfg = replace(cfg, lr=saved["lr"])
    return cfg.concrete(precision.value, compiled.value, optimizer)


def auto_optimizer(muon_runs: bool, reads_only_bidirectionally: bool) -> str:
    """What --optimizer auto stands for. Muon learned more in a fixed time than AdamW for
    causal LM, AdamW more for masked LM, at five paired seeds (benchmarks/results/
    time_to_quality_{clm,mlm}_defaults.json, time_to_quality_clm_5_seeds.json): Muon where it
    runs, unless the objective only reads both ways."""
    return "muon" if muon_runs and not reads_only_bidirectionally else "adamw"


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


def start(cfg: LoopConfig, env: distributed.Env, opening: Opening, config: RunConfig,
          model: LanguageModel, tokenizer_json: str | None,
          budgets: tuple[str, ...] = BUDGETS,
          before_writing: Callable[[RunConfig], None] | None = None) -> Started:
    """Write the run directory `opening` opened, with `config`, and make `model` (on its
    device, unwrapped) ready to train. `budgets` are the config fields a resume may lengthen;
    `before_writing` sees the config the run will have and may refuse it before anything is
    written."""
    if opening.resumed:
        config = resumed_config(opening, config, budgets)
    if before_writing is not None:
        before_writing(config)
    if env.is_main:
        prepare_run_dir(opening, config, tokenizer_json)
    distributed.barrier(env)  # the directory is written before any rank reads it
    resume_from = opening.checkpoint if opening.resumed else None
    if opening.resumed and resume_from is None and env.is_main:
        print(f"{opening.out} has no checkpoint yet: starting from step 0")
    # into the whole model, before sharding
    saved = load_resume_checkpoint(resume_from, model) if resume_from else None
    train_model = distributed.wrap(model, env, cfg.distributed)
    optimizer = optimizer_for(model, cfg)
    state = LoopState()
    if saved is not None:
        state = restore_loop_state(saved, resume_from, model, optimizer, env)
    return Started(config, train_model, optimizer, state, saved is not None)


def training(cfg: LoopConfig, env: distributed.Env, model: LanguageModel, out: Path,
             started: Started, **parts) -> Training:
    """The loop's Training, the one way every setup builds it: the fields every setup fills
    alike (the model as `start` made it ready, its optimizer and loop state, the gradient
    scaler of `cfg.precision`, the peak FLOP/s of all ranks) and `parts`, what the setup's own
    kind of training decides (the objective, data, schedule, validation and checkpoint
    intervals, headline, FLOPs per token, ...)."""
    return Training(cfg=cfg, env=env, model=model, train_model=started.train_model,
                    optimizer=started.optimizer, scaler=grad_scaler(cfg.precision, env.device),
                    out=out, state=started.state,
                    peak_flops=all_ranks_peak_flops(cfg.precision, env), **parts)


def budget_steps(minutes: float | None, cap: int | None, time_step: Callable[[], float],
                 env: distributed.Env) -> int:
    """The steps a run plans at its start (rank 0's, for every rank): its step cap, or under
    a time budget of `minutes` as many steps as fit at the seconds `time_step` measures, at
    most the cap. One timing, though it pays for warming up: the run's Deadline corrects the
    estimate as steps come."""
    if minutes is None:
        return cap
    if env.is_main:  # a step of a large model on a CPU can take minutes
        print(f"timing one training step to fit the run into {minutes:g} minutes", flush=True)
    timed = steps_in_minutes(minutes, time_step())
    return distributed.from_rank_0(min(cap, timed) if cap else timed, env)


def time_budget(minutes: float | None, cap: int | None, eval_every: int | None,
                resumed: bool) -> Deadline | None:
    """The time budget the loop keeps to: None without one, or for a resumed run (it keeps
    the plan made at its start). Unless told how often to validate (`eval_every`), the run
    validates DEADLINE_VALIDATIONS times spread over the time, so that even a short run plots
    a curve."""
    if minutes is None or resumed:
        return None
    return Deadline(minutes, cap, DEADLINE_VALIDATIONS if eval_every is None else 0)


def plan_length(started: Started, minutes: float | None, cap: int,
                time_step: Callable[[], float], eval_every: int | None,
                env: distributed.Env) -> Deadline | None:
    """A task run's length, as pre-training plans its own: the steps planned for its time
    budget (`minutes`; at most the `cap` its steps or epochs allow) set in the loop state,
    unless resumed (a resumed run keeps its plan), and the Deadline that keeps the budget."""
    if not started.resumed:
        started.state.total_steps = budget_steps(minutes, cap, time_step, env)
    return time_budget(minutes, cap, eval_every, started.resumed)
