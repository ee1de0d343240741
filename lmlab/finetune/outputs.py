"""A fine-tuned model over encoded rows: its outputs per row, then a task's predictions and
metrics. Rows of similar length are batched together, so little time goes to padding."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn
from tqdm import tqdm

from lmlab.finetune.base import Row, Task
from lmlab.kernels.precision import autocast
from lmlab.runs.schema import Reading


@torch.inference_mode()
def row_outputs(model: nn.Module, task: Task, rows: Sequence[Row], reading: Reading,
                token_types: bool, batch_size: int = 64, precision: str = "fp32",
                progress: str | None = None) -> list:
    """The task head's output for each row, in the order of `rows`, with a progress bar
    labelled `progress` (none without it)."""
    device = next(model.parameters()).device
    order = sorted(range(len(rows)), key=lambda index: len(rows[index].ids))
    found: list = [None] * len(rows)
    was_training = model.training
    model.eval()
    starts = range(0, len(order), batch_size)
    for start in tqdm(starts, desc=progress, unit="batch", disable=progress is None):
        chosen = order[start:start + batch_size]
        batch = task.batch([rows[i] for i in chosen], reading, token_types).to(device)
        with autocast(precision, device):
            outputs = model(**batch.model_inputs())
        for index, output in zip(chosen, task.row_outputs(outputs, batch), strict=True):
            found[index] = output
    model.train(was_training)
    return found


def evaluate_task(model: nn.Module, task: Task, examples: Sequence, rows: Sequence[Row],
                  reading: Reading, token_types: bool, batch_size: int = 64,
                  precision: str = "fp32") -> tuple[dict[str, float], list]:
    """(metrics, one prediction per example)."""
    outputs = row_outputs(model, task, rows, reading, token_types, batch_size, precision)
    predictions = task.predict(examples, rows, outputs)
    metrics = {name: float(value) for name, value in task.metrics(examples, predictions).items()}
    return metrics, predictions
