"""`lmlab finetune`: a pre-trained run and a labelled task → a fine-tuned run, trained by the
one loop (lmlab/train/loop.py) as pre-training is.

The fine-tuned run directory holds what `load_run` and `lmlab predict` need: the backbone with
the task's head, the tokenizer, the label names, and how the model reads (attention, pooling).
It also keeps results.json (validation and test metrics of the best checkpoint), predictions
and plots.
"""

from __future__ import annotations

import math
import sys
from dataclasses import replace
from pathlib import Path

from lmlab.data.special_tokens import SpecialTokens
from lmlab.extras import require_trackers
from lmlab.finetune.base import RECORDED_POOLINGS, Task, resolve_reading
from lmlab.finetune.data import TaskData
from lmlab.finetune.outputs import evaluate_task
from lmlab.finetune.registry import TASK_CLASSES, make_task
from lmlab.finetune.results import write_results
from lmlab.finetune.seeds import seed_configs, write_seed_summary
from lmlab.model import LanguageModel
from lmlab.model.flops import flops_per_token
from lmlab.model.heads import make_head, pools
from lmlab.runs import Run
from lmlab.runs.checkpoints import load_checkpoint
from lmlab.runs.layout import seen_from_run
from lmlab.runs.run import RunLoadError, load_run, pick_checkpoint
from lmlab.runs.schema import Reading, RunConfig, RunTask, Source
from lmlab.tasks.bow_floor import fit_floor, floor_line, require_scikit_learn
from lmlab.tasks.finetune_config import FinetuneConfig, default_lr
from lmlab.tasks.framing import PAIR_OVERHEAD, Encoder, padding_apart
from lmlab.tasks.splits import Splits, read_splits
from lmlab.tasks.traits import TASKS
from lmlab.train import distributed
from lmlab.train.loop import run_training
from lmlab.train.schedule import Schedule
from lmlab.train.setup import (
    begin,
    micro_batches_per_step,
    open_run,
    plan_length,
    resolve,
    start,
    training,
)
from lmlab.train.step import first_step_seconds


class FinetuneError(ValueError):
    """A fine-tuning that cannot be done as asked, stated in one line."""


def resolved(cfg: FinetuneConfig, pretrained: Run, splits: Splits) -> FinetuneConfig:
    """`cfg` with every `auto`/none that depends on the model or the data made concrete, so
    the saved config says exactly how the model was fine-tuned and reads."""
    reading = resolve_reading(pretrained.objective, cfg.attention, cfg.pooling,
                              _recorded_pooling(pretrained))
    max_len = cfg.max_len or pretrained.max_seq_len
    if max_len > pretrained.max_seq_len:
        raise FinetuneError(f"--max-len {max_len} is longer than the model's context of "
                            f"{pretrained.max_seq_len} tokens")
    if TASKS[cfg.task].second_text == "required" and max_len < PAIR_OVERHEAD + 2:
        raise FinetuneError(f"the {cfg.task} task needs at least {PAIR_OVERHEAD + 2} tokens per "
                            f"row ([CLS] A [SEP] B [SEP]); the context here is {max_len}")
    cfg = replace(cfg, attention=reading.attention, pooling=reading.pooling, max_len=max_len,
                  dropout=pretrained.model.cfg.dropout if cfg.dropout is None else cfg.dropout,
                  lr=default_lr(pretrained.model.cfg.d_model) if cfg.lr is None else cfg.lr)
    return TASK_CLASSES[cfg.task].resolved(cfg, splits.train)


def task_model(pretrained: LanguageModel, task: Task, dropout: float) -> LanguageModel:
    """The pre-trained backbone with the task's new head. A sequence head starts from the
    next-sentence pooler when pre-training trained one, as BERT's fine-tuning does."""
    cfg = pretrained.cfg.with_changes(dropout=dropout)
    model = LanguageModel(cfg, heads={task.head: make_head(task.head, cfg, **task.head_options())})
    model.backbone.load_state_dict(pretrained.backbone.state_dict())
    model.heads[task.head].start_from(pretrained.heads, model.backbone.token_embedding)
    return model


def finetune(source: str | Path, cfg: FinetuneConfig) -> Path:
    """Fine-tune the run at `source` as `cfg` says; returns the fine-tuned run directory
    (with several seeds, the directory holding one run per seed and their summary)."""
    require_trackers(cfg.report_to)  # before any work, once for every seed
    if cfg.baseline != "none":
        require_scikit_learn(f"--baseline {cfg.baseline}")
    if cfg.seeds == 1:
        return _finetune_one(source, cfg)[0]
    out = _out_dir(cfg)
    runs, floor = [], None
    for seed_cfg in seed_configs(cfg, out):  # the floor, the same for every seed, fitted once
        run, floor = _finetune_one(source, seed_cfg, floor)
        runs.append(run)
    write_seed_summary(out, cfg, runs)
    return out


def _encoded(task: Task, splits: Splits, encoder: Encoder, announce: bool) -> tuple[list, list]:
    """The training and validation rows; saying so first, as a large file takes a while."""
    if announce:
        print(f"tokenising {len(splits.train):,} training and {len(splits.validation):,} "
              "validation examples", flush=True)
    return (task.encode(splits.train, encoder, training=True),
            task.encode(splits.validation, encoder, training=False))


def _out_dir(cfg: FinetuneConfig) -> Path:
    return Path(cfg.out or f"runs/finetune-{cfg.task}")


def _finetune_one(source: str | Path, cfg: FinetuneConfig,
                  floor: dict | None = None) -> tuple[Path, dict | None]:
    """One fine-tuning run of `cfg.seed`, and the bag-of-words floor when `cfg.baseline` asks
    for it (fitted unless `floor` is given)."""
    env, out = begin(cfg.seed), _out_dir(cfg)
    opening = open_run(cfg, env, out, budgets=())
    if opening.kind == "finished":
        return out, floor
    pretrained = _load_pretrained(source, cfg)
    tokenizer = pretrained.require_tokenizer()
    splits = read_splits(cfg)
    cfg = resolved(cfg, pretrained, splits)
    task = make_task(cfg, splits.labels, splits.train)
    cfg = resolve(cfg, env, opening)  # said once the inputs are accepted
    reading = Reading(cfg.attention, cfg.pooling)
    model = task_model(pretrained.model, task, cfg.dropout).to(env.device)
    token_types = model.cfg.type_vocab_size > 0
    encoder = Encoder(tokenizer, pretrained.special, cfg.max_len, token_types)
    train_rows, validation_rows = _encoded(task, splits, encoder, env.is_main)
    micro_size, _ = micro_batches_per_step(cfg, env)  # checked before writing
    started = start(cfg, env, opening, _run_config(out, cfg, pretrained, model, task), model,
                    tokenizer.to_str(), budgets=())
    if env.is_main:
        print(_description(source, cfg, task, len(train_rows), pretrained))
        warn_if_unexportable(task, reading, pretrained.special)

    data = TaskData(task, train_rows, reading, token_types, cfg.batch_size, micro_size,
                    cfg.seed, env.rank, env.world_size, group_by_length=not cfg.mixed_lengths)
    cap = cfg.steps or math.ceil(cfg.epochs * data.steps_per_epoch)
    deadline = plan_length(started, cfg.minutes, cap, lambda: first_step_seconds(
        model, task, data, cfg.precision), cfg.eval_every, env)
    total_steps = started.state.total_steps
    warmup = cfg.warmup_steps if cfg.warmup_steps is not None else total_steps // 10
    run_training(training(
        cfg, env, model, out, started, objective=task, data=data, deadline=deadline,
        eval_every=cfg.eval_every or data.steps_per_epoch,
        checkpoint_every=cfg.checkpoint_every or total_steps,
        schedule=Schedule(cfg.schedule, total_steps, warmup, cfg.lr_floor),
        validate=lambda: evaluate_task(model, task, splits.validation, validation_rows,
                                       reading, token_types, precision=cfg.precision)[0],
        headline=lambda metrics: -metrics[task.main_metric], scores=(task.main_metric,),
        flops_per_token=flops_per_token(model.cfg, cfg.max_len, predicted_fraction=0.0)))
    if env.is_main:
        load_checkpoint(pick_checkpoint(out, "best"), model)
        if cfg.baseline != "none" and floor is None:
            floor = fit_floor(cfg.task, splits)
        print(_summary(write_results(out, model, task, splits, encoder, reading, cfg, floor),
                       task.main_metric))
    distributed.teardown()
    return out, floor


def _load_pretrained(source: str | Path, cfg: FinetuneConfig) -> Run:
    try:
        pretrained = load_run(source, cfg.pretrained_checkpoint)
    except RunLoadError as error:
        if error.damaged is None:
            raise
        raise RunLoadError(error.damaged.advised("--pretrained-checkpoint")) from None
    if pretrained.task is not None:
        raise FinetuneError(f"{source} is already fine-tuned for {pretrained.task.name}; "
                            "fine-tune the pre-trained run it came from")
    return pretrained


def _run_config(out: Path, cfg: FinetuneConfig, pretrained: Run, model: LanguageModel,
                task: Task) -> RunConfig:
    labels = None if task.labels is None else tuple(task.labels)
    return RunConfig(
        model.cfg, cfg.to_dict(), pretraining=dict(pretrained.config.pretraining_settings),
        source=Source(seen_from_run(out, pretrained.path), pretrained.checkpoint.name),
        task=RunTask(cfg.task, labels, Reading(cfg.attention, cfg.pooling), task.head,
                     task.head_options()),
        # an imported run's own roles (BERT has no [BOS])
        special_tokens=pretrained.config.special_tokens)


def _recorded_pooling(run: Run) -> str | None:
    """The pooling the run records for its embeddings (an imported sentence-transformers
    model's, kept through --init), or None."""
    return None if run.config.embedding is None else run.config.embedding.pooling


def _description(source: str | Path, cfg: FinetuneConfig, task: Task, train_rows: int,
                 pretrained: Run) -> str:
    pooling = ""
    if pools(task.head):
        recorded = RECORDED_POOLINGS.get(_recorded_pooling(pretrained))
        origin = " (as the model records)" if recorded == cfg.pooling else ""
        pooling = f", {cfg.pooling} pooling{origin}"
    return (f"fine-tuning {source} for {cfg.task}"
            + (f" ({len(task.labels)} labels)" if task.labels else "")
            + f": {cfg.attention} attention{pooling}, {cfg.max_len} tokens per row, "
            f"{train_rows} training rows")


def warn_if_unexportable(task: Task, reading: Reading, special: SpecialTokens) -> None:
    """Say before training what `lmlab export` would refuse after it: a row pooled at its last
    token is found by Hugging Face's GPT-2 and Llama sequence classes only through a padding
    id that no row ends with (lmlab.tasks.framing.padding_apart)."""
    if not pools(task.head) or reading.pooling != "last":
        return
    try:
        padding_apart(special)
    except ValueError as reason:
        print(f"lmlab finetune: lmlab export will refuse this run: {reason}, so Hugging Face's "
              "GPT-2 and Llama sequence classes could not find the token it pools (lmlab "
              "predict reads it)", file=sys.stderr)


def _summary(results: dict, metric: str) -> str:
    return (f"best validation {metric}: {results['validation'][metric]:.4f}"
            + (f"; test {metric}: {results['test'][metric]:.4f}" if "test" in results else "")
            + (f"\n{floor_line(results['baseline'], results)}" if "baseline" in results else ""))
