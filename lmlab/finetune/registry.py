"""The implementation of each task of the registry (traits.TASKS): the one table from a task's
name to its class. The pairs task (text pairs) is classify with a second text, which its traits
require."""

from __future__ import annotations

from collections.abc import Sequence

from lmlab.finetune.base import Task
from lmlab.finetune.ner_task import NERTask
from lmlab.finetune.qa_task import QATask
from lmlab.finetune.sequence_tasks import ClassifyTask, RegressTask
from lmlab.tasks.finetune_config import FinetuneConfig

TASK_CLASSES: dict[str, type[Task]] = {
    "classify": ClassifyTask, "pairs": ClassifyTask, "regress": RegressTask, "qa": QATask,
    "ner": NERTask,
}


def make_task(cfg: FinetuneConfig, labels: Sequence[str] | None = None,
              train: Sequence = ()) -> Task:
    return TASK_CLASSES[cfg.task](cfg, labels, train)
