"""A fine-tuning task taught by a teacher: its rows carry the teacher's outputs, and the loss
is the soft-label term on every row plus `hard_weight` × the task's own loss on the rows that
have a label."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from lmlab.distill.losses import number_loss, soft_label_loss
from lmlab.finetune.base import Row, Task
from lmlab.objectives.batch import Batch
from lmlab.objectives.losses import LossSum
from lmlab.runs.schema import Reading

TEACHER = "teacher"  # Row.extra and Batch.extras key of the teacher's output


class TaughtTask:
    """`task` (classify, pairs or regress) as the student trains on it; validation and
    prediction use `task` itself."""

    def __init__(self, task: Task, temperature: float, hard_weight: float) -> None:
        self.task, self.temperature, self.hard_weight = task, temperature, hard_weight
        self.name, self.head = task.name, task.head

    def batch(self, rows: Sequence[Row], reading: Reading, token_types: bool) -> Batch:
        batch = self.task.batch(rows, reading, token_types)  # labels only if every row has one
        batch.extras[TEACHER] = torch.stack([row.extra[TEACHER] for row in rows])
        batch.extras["labelled"] = torch.tensor([row.target is not None for row in rows])
        batch.extras["hard"] = torch.tensor([row.target if row.target is not None else 0
                                             for row in rows], dtype=self.task.label_type)
        return batch

    def outputs(self, model, batch: Batch, unprojected: bool = False) -> dict:
        return self.task.outputs(model, batch, unprojected)

    def target_counts(self, batch: Batch) -> dict[str, Tensor]:
        return {"distill": torch.tensor(len(batch.input_ids)),
                "label": batch.extras["labelled"].sum()}

    def loss(self, outputs: dict, batch: Batch) -> LossSum:
        student, teacher = outputs[self.head], batch.extras[TEACHER]
        regress = self.task.label_type == torch.float32
        soft = (number_loss(student, teacher) if regress
                else soft_label_loss(student, teacher, self.temperature))
        labelled = batch.extras["labelled"]
        hard_rows = student[labelled].float()
        gold = batch.extras["hard"][labelled]
        hard = (number_loss(hard_rows, gold) if regress else
                torch.nn.functional.cross_entropy(hard_rows, gold, reduction="sum"))
        return LossSum({"distill": (soft, torch.tensor(len(student))),
                        "label": (self.hard_weight * hard, labelled.sum())})
