"""One sub-run of a comparison, start to finish: pre-train it (or continue it), then score it on
every measure and keep the item scores beside it in scores.npz.

A sub-run is an ordinary run directory, so any lmlab command can read it. It is finished when
its scores.npz exists; a pre-training that finished but was not scored is scored, one that was
interrupted after a checkpoint continues from it, so re-running a comparison redoes nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import TYPE_CHECKING

import numpy as np

from lmlab.atomic import atomic_write, write_text_atomic
from lmlab.compare.arms import Start, SubRun
from lmlab.compare.design import CONTROL, CompareConfig
from lmlab.compare.measures import (
    MINIMAL_PAIRS,
    HeldOut,
    first_rule_head,
    minimal_pair_groups,
    minimal_pair_scores,
    probe_measure,
    text_scores,
)
from lmlab.config.options import flag
from lmlab.data.dataset import Dataset
from lmlab.finetune import finetune
from lmlab.finetune.results import ITEM_SCORES, read_item_scores
from lmlab.objectives.base import Objective
from lmlab.objectives.registry import build_objective
from lmlab.runs.checkpoints import PREFIX, list_checkpoints
from lmlab.runs.layout import split_init
from lmlab.runs.metrics import read_metrics
from lmlab.runs.run import load_run
from lmlab.train.entry import pretrain_with_settings
from lmlab.train.loop import TrainingError
from lmlab.train.warm_start import checked_source

SCORES = "scores.npz"
PRETRAINED = "pretrained.json"  # written when pre-training ended: its wall time and steps

if TYPE_CHECKING:
    from lmlab.train.warm_start import InitSource


def finished(sub: SubRun) -> bool:
    return (sub.out / SCORES).is_file()


def read_scores(sub: SubRun) -> dict[str, np.ndarray]:
    """Measure → (fine-tuning seeds, items); measures without fine-tuning have one row."""
    with np.load(sub.out / SCORES) as saved:
        return {name: saved[name] for name in saved.files}


def read_ledger(sub: SubRun) -> dict:
    """What the sub-run spent: steps, tokens, FLOPs, expected supervised predictions, seconds."""
    spent = json.loads((sub.out / PRETRAINED).read_text())
    steps = spent["steps"]
    return {"objective": sub.objective, "fraction": sub.fraction, "seed": sub.seed,
            "steps": steps, "tokens": steps * sub.tokens_per_step,
            "flops": steps * sub.flops_per_step,
            "predictions": steps * sub.predictions_per_step, "seconds": spent["seconds"]}


def read_warnings(sub: SubRun, objectives: dict[str, Objective]) -> list[str]:
    """What the sub-run's evaluated objectives (`Objective.evaluated_leaves`) warn of in its
    last validation (`Objective.warnings`): a sub-run validates once, at its end."""
    evals = [record for record in read_metrics(sub.out) if record["kind"] == "eval"]
    return [line for objective in objectives.values()
            for line in objective.warnings(evals[-1])] if evals else []


def starting_point(cfg: CompareConfig, dataset: Dataset) -> Start | None:
    """With --init, its run (loaded, its weights verified, its context and tokenizer checked
    against the design's) as every arm's start; None from random weights."""
    if cfg.init is None:
        return None
    source = checked_source(cfg.init, cfg.seq_len, dataset, cfg.data)
    return Start(source.model_cfg, control_objective(cfg, source, dataset))


def control_objective(cfg: CompareConfig, source: InitSource, dataset: Dataset) -> str:
    """What the control runs for no steps: the source's own objective when the source has
    every head it trains (the control's heads are then the source's own), else the first
    adaptation's (an imported encoder without heads: its new heads made as that arm makes
    them)."""
    own = source.run.spec
    try:
        heads = build_objective(own, source.run.special, word_starts=dataset.word_starts).heads
    except ValueError:  # the source's own objective cannot read this data
        heads = None
    if heads is not None and all(name in source.run.model.heads for name in heads):
        return own
    return next((spec for spec in cfg.objectives if spec != CONTROL), own)


def complete(sub: SubRun, cfg: CompareConfig, data: str, ranks: int = 1) -> None:
    """Pre-train `sub` unless that is done, in `ranks` processes (more than one: a torchrun job
    on this machine, one per GPU), then score it."""
    if not (sub.out / PRETRAINED).is_file():
        _pretrain(sub, cfg, data, ranks)
    run = load_run(sub.out, "last")
    # The control trained nothing: a head its source lacks is untrained there, and its text
    # and minimal-pair scores through it say nothing of the source.
    learned = (tuple(load_run(*split_init(cfg.init)).model.heads)
               if sub.objective == CONTROL else None)
    scores = {name: values[None] for name, values in
              text_scores(run, HeldOut.of(run, data, cfg.eval_tokens), learned).items()}
    if cfg.pairs and (learned is None or first_rule_head(run) in learned):
        minimal_pairs, _ = minimal_pair_groups(cfg.pairs)
        scores[MINIMAL_PAIRS] = minimal_pair_scores(run, minimal_pairs)[None]
    for probe in cfg.probes:
        metric, rows = _probe(sub, cfg, probe)
        scores[probe_measure(probe.name, metric)] = np.stack(rows)
    with atomic_write(sub.out / SCORES, "wb") as file:
        np.savez(file, **scores)


def _pretrain(sub: SubRun, cfg: CompareConfig, data: str, ranks: int) -> None:
    started = time.perf_counter()
    interrupted = bool(list_checkpoints(sub.out / "checkpoints"))
    budget = {"steps": sub.steps} if sub.steps is not None else {"minutes": sub.minutes}
    # one validation and one checkpoint at the end: equal compute, nothing spent between
    every = sub.steps or 10**9
    # with --init, the source's model (each arm continues it; the control for no steps)
    start = {"model": cfg.model} if cfg.init is None else {"init": cfg.init}
    fields = dict(
        objective=sub.pretrains_with, data=data, **start, seq_len=cfg.seq_len,
        batch_size=cfg.batch_size, lr=cfg.lr, optimizer=cfg.optimizer,
        precision=cfg.precision, seed=sub.seed,
        out=str(sub.out), eval_every=every, checkpoint_every=every, keep_last=1,
        report_to=cfg.report_to,
        resume=interrupted, overwrite=not interrupted and sub.out.exists(), **budget,
        **(cfg.objective_options or {}))
    if ranks > 1:
        _torchrun(fields, ranks)
    else:
        pretrain_with_settings(None, fields)
    last = list_checkpoints(sub.out / "checkpoints")[-1]
    steps = int(last.name.removeprefix(PREFIX))
    write_text_atomic(sub.out / PRETRAINED, json.dumps(
        {"steps": steps, "seconds": time.perf_counter() - started}))


def _torchrun(fields: dict, ranks: int) -> None:
    """`lmlab pretrain` with `fields` as options, under torchrun in `ranks` processes on this
    machine (its own rendezvous, so several can share a node)."""
    options = []
    for name, value in fields.items():  # a switch when true; left out when false or unset
        if value is True:
            options.append(flag(name))
        elif value is not None and value is not False:
            options += [flag(name), str(value)]
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
               str(ranks), "-m", "lmlab", "pretrain", *options]
    code = subprocess.run(command).returncode
    if code:
        raise TrainingError(f"pre-training {fields['out']} under torchrun exited {code}; its "
                            f"ranks' output above says why")


def _probe(sub: SubRun, cfg: CompareConfig, probe) -> tuple[str, list[np.ndarray]]:
    """Fine-tune `sub` on `probe` once per fine-tuning seed (reusing finished ones); the
    probe's main metric and each seed's item scores on its scored split."""
    rows, metric = [], None
    lr = {"lr": cfg.probe_lr} if cfg.probe_lr is not None else {}
    for seed in range(cfg.probe_seeds):
        out = sub.out / "probes" / probe.name / f"seed-{seed}"
        if not (out / ITEM_SCORES).is_file():
            finetune(sub.out, probe.config, task=probe.task, train=probe.train,
                     validation=probe.validation, test=probe.test, seed=seed,
                     epochs=cfg.probe_epochs, pretrained_checkpoint="last",
                     precision=cfg.precision, out=str(out), overwrite=True,
                     report_to=cfg.report_to, **lr)
        items = read_item_scores(out)
        metric = items["metric"]
        rows.append(np.asarray(items[probe.scored_split], dtype=float))
    return metric, rows
