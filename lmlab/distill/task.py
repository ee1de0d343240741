"""A fine-tuning task taught by a teacher: its rows carry the teacher's outputs, and the loss
is the soft-label term on every row (every scored token, for a token task) plus `hard_weight`
× the task's own loss where the examples have labels."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from lmlab.distill.losses import number_loss, soft_label_loss
from lmlab.finetune.base import Row, Task
from lmlab.model.heads import HEADS
from lmlab.model.selectors import Pooling
from lmlab.objectives.batch import Batch
from lmlab.objectives.losses import IGNORE_INDEX, LossSum
from lmlab.runs.schema import Reading

TEACHER = "teacher"  # Row.extra and Batch.extras key of the teacher's outputs


def per_row(task: Task) -> bool:
    """Whether the task's head gives one output per row (classify, pairs, regress), not one
    per scored token (ner)."""
    return Pooling in HEADS[task.head].accepts


def teacher_scores(task: Task, output) -> Tensor:
    """What the student learns of one row, from the task's row output: log-probabilities
    (1, labels) of a label, (1, 1) of a number, or (scored tokens, labels) of a token task."""
    if not per_row(task):
        _, probabilities = output
        return torch.as_tensor(probabilities, dtype=torch.float32).clamp_min(1e-12).log()
    scores = torch.as_tensor(output, dtype=torch.float32).reshape(1, -1)
    return scores if task.labels is None else scores.clamp_min(1e-12).log()


class TaughtTask:
    """`task` as the student trains on it; validation and prediction use `task` itself."""

    def __init__(self, task: Task, temperature: float, hard_weight: float) -> None:
        self.task, self.temperature, self.hard_weight = task, temperature, hard_weight
        self.name, self.head = task.name, task.head

    def batch(self, rows: Sequence[Row], reading: Reading, token_types: bool) -> Batch:
        batch = self.task.batch(rows, reading, token_types)  # labels only if every row has one
        batch.extras[TEACHER] = torch.cat([row.extra[TEACHER] for row in rows])
        if per_row(self.task):
            batch.extras["labelled"] = torch.tensor([row.target is not None for row in rows])
            batch.extras["hard"] = torch.tensor(
                [0 if row.target is None else row.target for row in rows],
                dtype=torch.float32 if self.task.labels is None else torch.long)
        return batch

    def outputs(self, model, batch: Batch, unprojected: bool = False) -> dict:
        return self.task.outputs(model, batch, unprojected)

    def target_counts(self, batch: Batch) -> dict[str, Tensor]:
        scored = torch.tensor(len(batch.extras[TEACHER]))
        if per_row(self.task):
            return {"distill": scored, "label": batch.extras["labelled"].sum()}
        return {"distill": scored, "label": (batch.targets != IGNORE_INDEX).sum()}

    def loss(self, outputs: dict, batch: Batch) -> LossSum:
        student, teacher = outputs[self.head], batch.extras[TEACHER]
        counts = self.target_counts(batch)
        if self.task.labels is None:  # a number: the teacher's, then the label's
            soft = number_loss(student, teacher)
        else:
            soft = soft_label_loss(student, teacher, self.temperature)
        return LossSum({"distill": (soft, counts["distill"]),
                        "label": (self.hard_weight * self._hard(student, batch),
                                  counts["label"])})

    def _hard(self, student: Tensor, batch: Batch) -> Tensor:
        """The task's own summed loss over the labelled rows (or tokens)."""
        if not per_row(self.task):
            return self.task.loss({self.head: student}, batch).terms[self.name][0]
        labelled = batch.extras["labelled"]
        rows, gold = student[labelled].float(), batch.extras["hard"][labelled]
        if self.task.labels is None:
            return number_loss(rows, gold)
        return F.cross_entropy(rows, gold, reduction="sum")
