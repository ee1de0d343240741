"""General distillation: a student learns a pre-trained teacher's signals (signals.py) on the
blocks of a prepared dataset, on the one loop, and is saved as a pre-trained run (masked LM
with its head, or a bare encoder when it imitated relations alone) that `lmlab finetune` and
the other commands read as any other."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import torch

from lmlab.data.dataset import Dataset, open_dataset
from lmlab.data.loader import BlockBatches
from lmlab.distill.config import DistillConfig
from lmlab.distill.signals import IMITATIONS, TeacherSignals
from lmlab.distill.student import student_model
from lmlab.finetune.entry import FinetuneError
from lmlab.model.flops import flops_per_token
from lmlab.model.heads import make_head
from lmlab.objectives.documents import blocks_pad_with
from lmlab.objectives.mlm import MaskedLM
from lmlab.runs import Run
from lmlab.runs.layout import seen_from_run
from lmlab.runs.schema import RunConfig
from lmlab.tasks.finetune_config import default_lr
from lmlab.train.entry import PretrainingData
from lmlab.train.loop import run_training
from lmlab.train.schedule import Schedule
from lmlab.train.setup import (
    micro_batches_per_step,
    open_run,
    plan_length,
    resolve,
    start,
    training,
)
from lmlab.train.step import one_step_seconds
from lmlab.train.validation import EVAL_SEED, headline_loss
from lmlab.train.warm_start import canonical_tokenizer

EVAL_BLOCKS = 8


def teacher_dataset(cfg: DistillConfig, teacher: Run) -> Dataset:
    """The dataset, which must be tokenised with the teacher's tokenizer."""
    dataset = open_dataset(Path(cfg.data))
    teacher_tokenizer = canonical_tokenizer(teacher.require_tokenizer().to_str())
    if dataset.tokenizer_json is None or canonical_tokenizer(
            dataset.tokenizer_json) != teacher_tokenizer:
        raise FinetuneError(f"{cfg.data} was not prepared with the teacher's tokenizer; "
                            f"prepare it with: lmlab prepare TEXT --tokenizer {teacher.path} "
                            "--out DIR")
    if IMITATIONS[cfg.imitate].distribution and "mlm" not in teacher.model.heads:
        raise FinetuneError(f"{teacher.path} has no masked-LM head to imitate; give "
                            "--imitate relations")
    return dataset


def distill_general(teacher: Run, cfg: DistillConfig, env) -> Path:
    dataset = teacher_dataset(cfg, teacher)
    mlm = IMITATIONS[cfg.imitate].distribution
    model = student_model(teacher.model, cfg, lambda shape: (
        {"mlm": make_head("mlm", shape)} if mlm else {})).to(env.device)
    out = Path(cfg.out or "runs/distilled")
    opening = open_run(cfg, env, out, budgets=())
    if opening.kind == "finished":
        return out
    cfg = resolve(replace(cfg, lr=cfg.lr or default_lr(model.cfg.d_model)), env, opening)
    relation_heads = math.gcd(teacher.model.cfg.kv_heads, model.cfg.kv_heads)
    objective = TeacherSignals(MaskedLM(dataset.special), teacher.model, relation_heads,
                               cfg.imitate, cfg.temperature)
    micro_size, accumulation = micro_batches_per_step(cfg, env)
    pad = blocks_pad_with(dataset.special)
    blocks, validation = (
        BlockBatches(split, cfg.seq_len, micro_size, "concatenate",
                     dataset.special.padding_id if pad is None else pad, dataset.special.sep,
                     seed, env.rank, env.world_size)
        for split, seed in ((dataset.train, cfg.seed), (dataset.validation, 0)))
    config = RunConfig(model.cfg, {**cfg.to_dict(), "objective": "mlm"},
                       dataset=seen_from_run(out, dataset.path), heads=None if mlm else {},
                       special_tokens=teacher.config.special_tokens)
    started = start(cfg, env, opening, config, model, dataset.tokenizer_json, budgets=())
    data = PretrainingData(blocks, objective, accumulation, 0)
    cap = cfg.steps or max(1, math.ceil(cfg.epochs * blocks.batches_per_epoch / accumulation))
    deadline = plan_length(started, cfg.minutes, cap, lambda: accumulation * one_step_seconds(
        model, objective, dataset.special, micro_size, cfg.seq_len, cfg.precision),
        cfg.eval_every, env)
    total = started.state.total_steps
    eval_blocks = [validation.batch(i).tokens
                   for i in range(min(EVAL_BLOCKS, validation.batches_per_epoch))]
    if env.is_main:
        print(f"distilling {teacher.path} ({teacher.model.cfg.n_layers} layers) into a "
              f"{model.cfg.n_layers}-layer student, d={model.cfg.d_model}, imitating "
              f"{cfg.imitate} on {cfg.data}: {total} steps")
    run_training(training(
        cfg, env, model, out, started, objective=objective, data=data, deadline=deadline,
        schedule=Schedule(cfg.schedule, total, cfg.warmup_steps or total // 20, cfg.lr_floor),
        validate=lambda: held_out_losses(model, objective, eval_blocks, env.device),
        headline=headline_loss, eval_every=cfg.eval_every or max(1, total // 4),
        checkpoint_every=cfg.checkpoint_every or total,
        flops_per_token=flops_per_token(model.cfg, cfg.seq_len,
                                        objective.predicted_fraction(micro_size, cfg.seq_len)),
        title=f"student of {teacher.path.name}"))
    return out


@torch.no_grad()
def held_out_losses(model, objective: TeacherSignals, blocks: list, device) -> dict[str, float]:
    """Each distillation term's mean on the held-out blocks, masked with a fixed seed."""
    was_training = model.training
    model.eval()
    generator = torch.Generator().manual_seed(EVAL_SEED)
    totals: dict[str, list[float]] = {}
    for tokens in blocks:
        batch = objective.make_batch(tokens, generator).to(device)
        for term, (loss_sum, count) in objective.loss(objective.outputs(model, batch),
                                                      batch).terms.items():
            found = totals.setdefault(term, [0.0, 0.0])
            found[0], found[1] = found[0] + float(loss_sum), found[1] + float(count)
    model.train(was_training)
    return {f"distill/{term}_loss": total / max(count, 1)
            for term, (total, count) in totals.items()}
