"""`lmlab distill TEACHER`: a fine-tuned teacher labels the task's training texts (and any
unlabelled ones) with its scores; a student, cut from the teacher or fresh from a preset,
learns them (and the given labels) on the one loop, and is saved as an ordinary fine-tuned
run: predict, embed, export, serve and compare read it as any other."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

from lmlab.distill.config import DistillConfig
from lmlab.distill.general import distill_general
from lmlab.distill.student import student_model
from lmlab.distill.task import TEACHER, TaughtTask, teacher_scores
from lmlab.extras import require_trackers
from lmlab.finetune.base import Row, Task
from lmlab.finetune.data import TaskData
from lmlab.finetune.entry import FinetuneError, _run_config
from lmlab.finetune.outputs import evaluate_task, row_outputs
from lmlab.finetune.registry import make_task
from lmlab.finetune.results import write_results
from lmlab.model import LanguageModel
from lmlab.model.flops import flops_per_token
from lmlab.model.heads import make_head
from lmlab.runs import Run
from lmlab.runs.checkpoints import load_checkpoint
from lmlab.runs.run import load_run, pick_checkpoint
from lmlab.runs.schema import Reading
from lmlab.tasks.finetune_config import default_lr
from lmlab.tasks.formats import example_files
from lmlab.tasks.framing import Encoder
from lmlab.tasks.splits import read_splits
from lmlab.train import distributed
from lmlab.train.loop import Training, run_training
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

TASKS = ("classify", "pairs", "regress", "ner")  # the teacher's scores are the student's targets


def load_teacher(path: str | Path, general: bool) -> Run:
    """The teacher: fine-tuned for one of TASKS, or, for general distillation (`general`),
    pre-trained."""
    teacher = load_run(path)
    if general:
        if teacher.task is not None:
            raise FinetuneError(f"{path} is fine-tuned for {teacher.task.name}; general "
                                "distillation (--data) needs a pre-trained teacher")
        return teacher
    if teacher.task is None or teacher.task.name not in TASKS:
        found = "not fine-tuned" if teacher.task is None else f"fine-tuned for {teacher.task.name}"
        raise FinetuneError(f"{path} is {found}; distill needs a teacher fine-tuned for "
                            f"{', '.join(TASKS)}, or --data to distil a pre-trained one")
    return teacher


def taught_config(cfg: DistillConfig, teacher: Run) -> DistillConfig:
    """`cfg` with the teacher's task, reading and row length; no dropout unless asked (the
    teacher's soft labels regularise)."""
    reading, settings = teacher.task.reading, teacher.config.train
    return replace(cfg, task=teacher.task.name, attention=reading.attention,
                   pooling=reading.pooling, max_len=cfg.max_len or settings["max_len"],
                   dropout=0.0 if cfg.dropout is None else cfg.dropout)


def unlabelled_examples(cfg: DistillConfig) -> list:
    """The task's examples of --unlabelled's lines, as `lmlab predict` reads typed texts."""
    if cfg.unlabelled is None:
        return []
    lines = Path(cfg.unlabelled).read_text(encoding="utf-8").splitlines()
    return example_files(cfg).from_texts([line for line in lines if line.strip()])


def with_teacher_outputs(rows: list[Row], teacher: Run, task: Task, reading: Reading,
                         token_types: bool) -> list[Row]:
    """`rows`, each carrying the teacher's scores for it (one pass, no gradient)."""
    outputs = row_outputs(teacher.model, task, rows, reading, token_types,
                          progress="teacher scores")
    return [replace(row, extra={**row.extra, TEACHER: teacher_scores(task, output)})
            for row, output in zip(rows, outputs, strict=True)]


def distill(teacher_path: str | Path, cfg: DistillConfig) -> Path:
    """Distil the fine-tuned run at `teacher_path` into a student as `cfg` says; returns the
    student's run directory."""
    require_trackers(cfg.report_to)  # before any work
    env = begin(cfg.seed)
    teacher = load_teacher(teacher_path, general=cfg.data is not None)
    teacher.model.to(env.device)
    if cfg.data is not None:
        out = distill_general(teacher, cfg, env)
        distributed.teardown()
        return out
    cfg = taught_config(cfg, teacher)
    splits = read_splits(cfg)
    check_labels(cfg, splits.train, teacher)
    task = make_task(cfg, teacher.task.labels)
    model = student_model(teacher.model, cfg, lambda shape: {
        task.head: make_head(task.head, shape, **task.head_options())}).to(env.device)
    out = Path(cfg.out or f"runs/distill-{cfg.task}")
    opening = open_run(cfg, env, out, budgets=())
    if opening.kind == "finished":
        return out
    cfg = resolve(replace(cfg, lr=cfg.lr or default_lr(model.cfg.d_model)), env, opening)
    reading, token_types = Reading(cfg.attention, cfg.pooling), model.cfg.type_vocab_size > 0
    encoder = Encoder(teacher.require_tokenizer(), teacher.special, cfg.max_len, token_types)
    taught_rows = with_teacher_outputs(
        task.encode(splits.train + unlabelled_examples(cfg), encoder, training=True),
        teacher, task, reading, token_types)
    validation_rows = task.encode(splits.validation, encoder, training=False)
    micro_size, _ = micro_batches_per_step(cfg, env)
    started = start(cfg, env, opening, _run_config(out, cfg, teacher, model, task), model,
                    encoder.tokenizer.to_str(), budgets=())
    if env.is_main:
        print(f"distilling {teacher_path} ({teacher.model.cfg.n_layers} layers) into a "
              f"{model.cfg.n_layers}-layer student, d={model.cfg.d_model}: "
              f"{len(taught_rows)} rows, temperature {cfg.temperature}")
    data = TaskData(TaughtTask(task, cfg.temperature, cfg.hard_weight), taught_rows, reading,
                    token_types, cfg.batch_size, micro_size, cfg.seed, env.rank,
                    env.world_size, group_by_length=not cfg.mixed_lengths)
    run_training(_training(cfg, env, model, started, data, task, out, lambda: evaluate_task(
        model, task, splits.validation, validation_rows, reading, token_types,
        precision=cfg.precision)[0]))
    if env.is_main:
        load_checkpoint(pick_checkpoint(out, "best"), model)
        results = write_results(out, model, task, splits, encoder, reading, cfg)
        metric = task.main_metric
        print(f"best validation {metric}: {results['validation'][metric]:.4f}"
              + (f"; test {metric}: {results['test'][metric]:.4f}" if "test" in results
                 else ""))
    distributed.teardown()
    return out


def check_labels(cfg: DistillConfig, train: list, teacher: Run) -> None:
    """Training labels must be the teacher's."""
    example_files(cfg).check_known(train, teacher.task.labels, cfg.train)


def _training(cfg: DistillConfig, env, model: LanguageModel, started, data: TaskData,
              task: Task, out: Path, validate) -> Training:
    """The loop's inputs, as fine-tuning sets them: its length (a time budget kept as
    pre-training keeps one), a validation every epoch, the best checkpoint by the task's main
    metric."""
    cap = cfg.steps or math.ceil(cfg.epochs * data.steps_per_epoch)
    deadline = plan_length(started, cfg.minutes, cap, lambda: first_step_seconds(
        model, data.task, data, cfg.precision), cfg.eval_every, env)
    total_steps = started.state.total_steps
    warmup = cfg.warmup_steps if cfg.warmup_steps is not None else total_steps // 10
    return training(
        cfg, env, model, out, started, objective=data.task, data=data, deadline=deadline,
        eval_every=cfg.eval_every or data.steps_per_epoch,
        checkpoint_every=cfg.checkpoint_every or total_steps,
        schedule=Schedule(cfg.schedule, total_steps, warmup, cfg.lr_floor),
        validate=validate, headline=lambda metrics: -metrics[task.main_metric],
        flops_per_token=flops_per_token(model.cfg, cfg.max_len, predicted_fraction=0.0),
        scores=(task.main_metric,))
