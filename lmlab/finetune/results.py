"""What a fine-tuned run leaves for people to read: results.json (validation and test metrics
of the best checkpoint, and the bag-of-words floor where one was asked for), each split's
predictions as JSON lines, what the task adds (a confusion matrix, CoNLL predictions), and
item-scores.json: per example, the values whose mean is the main metric, for paired
comparisons between runs."""

from __future__ import annotations

import json
from pathlib import Path

from torch import nn

from lmlab.atomic import atomic_write, write_text_atomic
from lmlab.finetune.base import Task
from lmlab.finetune.outputs import evaluate_task
from lmlab.runs.schema import Reading
from lmlab.tasks.finetune_config import FinetuneConfig
from lmlab.tasks.framing import Encoder

RESULTS = "results.json"
ITEM_SCORES = "item-scores.json"


def write_results(out: Path, model: nn.Module, task: Task, splits, encoder: Encoder,
                  reading: Reading, cfg: FinetuneConfig, baseline: dict | None = None) -> dict:
    """Score the model (its best checkpoint, loaded) on validation and test; write results,
    predictions and plots, with the `baseline` floor beside them when one was fitted
    (lmlab.tasks.bow_floor). Returns the results."""
    results = {"task": cfg.task, "attention": reading.attention, "pooling": reading.pooling,
               "main_metric": task.main_metric}
    token_types = encoder.token_types
    items = {"metric": task.main_metric}
    for split in ("validation", "test"):
        examples = getattr(splits, split)
        if examples is None:
            continue
        rows = task.encode(examples, encoder, training=False)
        metrics, predictions = evaluate_task(model, task, examples, rows, reading, token_types,
                                             precision=cfg.precision)
        results[split] = metrics
        items[split] = task.item_scores(examples, predictions)
        _write_predictions(out / f"predictions-{split}.jsonl", task, predictions)
        task.report(out, split, examples, predictions)
    if baseline is not None:
        results["baseline"] = baseline
    write_text_atomic(out / ITEM_SCORES, json.dumps(items))
    write_text_atomic(out / RESULTS, json.dumps(results, indent=2))
    return results


def _write_predictions(path: Path, task: Task, predictions: list) -> None:
    with atomic_write(path) as file:
        for prediction in predictions:
            file.write(json.dumps(task.describe(prediction)) + "\n")


def read_results(run: str | Path) -> dict:
    return json.loads((Path(run) / RESULTS).read_text())


def read_item_scores(run: str | Path) -> dict:
    """{"metric": the main metric, "validation": [...], "test": [...]} (the splits scored)."""
    return json.loads((Path(run) / ITEM_SCORES).read_text())
