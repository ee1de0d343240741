"""`lmlab distill`'s settings: fine-tuning's, and how the student is made and taught."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from lmlab.config.fields import documented
from lmlab.tasks.finetune_config import FinetuneConfig


@dataclass(frozen=True)
class DistillConfig(FinetuneConfig):
    unlabelled: str | None = documented(
        None, "texts without labels, one per line, that the teacher labels for the student")
    layers: int | None = documented(
        None, "cut the student from the teacher: keep this many evenly spaced layers")
    width: float | None = documented(
        None, "with --layers: keep this share of every layer's attention heads and MLP "
        "neurons, the most important by weight magnitude")
    student: str | None = documented(
        None, "or a fresh student of this preset (e.g. modern-tiny), with the teacher's "
        "tokenizer")
    data: str | None = documented(
        None, "general distillation from a pre-trained teacher: a dataset prepared with its "
        "tokenizer (lmlab prepare TEXT --tokenizer TEACHER)")
    imitate: Literal["mlm", "relations", "both"] = documented(
        "mlm", "general distillation: the teacher's masked-LM distribution, its last layer's "
        "attention relations (MiniLMv2), or both")
    seq_len: int = documented(128, "general distillation: tokens per block")
    temperature: float = documented(2.0, "softening of the teacher's and student's scores")
    hard_weight: float = documented(
        0.5, "weight of the loss on the given labels beside the teacher's (0 = teacher only)")

    @property
    def reads_task_files(self) -> bool:
        return self.data is None

    def __post_init__(self) -> None:
        super().__post_init__()
        if (self.layers is None) == (self.student is None):
            raise ValueError("give the student as --layers N (cut from the teacher) or "
                             "--student PRESET, one of them")
        if self.class_weights != "none":  # the soft labels carry the teacher's balance
            raise ValueError("--class-weights is for lmlab finetune; a student learns the "
                             "teacher's scores")
        if self.width is not None and (self.layers is None or not 0 < self.width <= 1):
            raise ValueError("--width takes a share in (0, 1] of a student cut with --layers")
        if not self.temperature > 0 or self.hard_weight < 0:
            raise ValueError("--temperature must be positive and --hard-weight at least 0")
