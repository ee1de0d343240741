"""The fine-tuning tasks by name: the one table from a task's name to its class."""

from __future__ import annotations

from lmlab.finetune.config import FinetuneConfig
from lmlab.finetune.ner_task import NERTask
from lmlab.finetune.qa_task import QATask
from lmlab.finetune.sequence_tasks import ClassifyTask, PairsTask, RegressTask
from lmlab.finetune.task import Task

TASKS: dict[str, type[Task]] = {
    "classify": ClassifyTask, "pairs": PairsTask, "regress": RegressTask, "qa": QATask,
    "ner": NERTask,
}


def make_task(cfg: FinetuneConfig, labels: list[str] | None = None) -> Task:
    return TASKS[cfg.task](cfg, labels)
