"""What a student imitates of a pre-trained teacher on raw text (general distillation): the
teacher's masked-LM distribution at the masked positions, and/or its last layer's
self-attention relations (MiniLMv2; Wang et al. 2021): for queries, keys and values alike,
softmax(X Xᵀ / √d_r) per relation head, learned by KL from the teacher's."""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lmlab.distill.losses import soft_label_loss
from lmlab.objectives.base import Objective
from lmlab.objectives.batch import Batch
from lmlab.objectives.losses import IGNORE_INDEX, LossSum, targets_at
from lmlab.objectives.mlm import MaskedLM
from lmlab.objectives.traits import Traits

Imitate = Literal["mlm", "relations", "both"]


@dataclass(frozen=True)
class Imitation:
    """What a student learns from its teacher: its masked-LM distribution at the masked
    positions, its last layer's relations at every real token, or both."""

    distribution: bool
    relations: bool


# --imitate's names → what each imitates: the one place that reads them.
IMITATIONS: dict[str, Imitation] = {"mlm": Imitation(distribution=True, relations=False),
                                    "relations": Imitation(distribution=False, relations=True),
                                    "both": Imitation(distribution=True, relations=True)}


def relations(qkv: Tensor, counts: tuple[int, int, int], head_dim: int, heads: int,
              real: Tensor) -> Tensor:
    """(3, B, heads, T, T) log-relations of the queries, keys and values in `qkv` (B, T, width):
    each split into `heads` relation heads, then log softmax(X Xᵀ / √d_r) over real keys."""
    parts = qkv.float().split([count * head_dim for count in counts], dim=-1)
    found = []
    for part in parts:
        batch, length, width = part.shape
        split = part.view(batch, length, heads, width // heads).transpose(1, 2)  # (B, R, T, dr)
        scores = split @ split.transpose(-1, -2) / math.sqrt(width // heads)  # (B, R, T, T)
        found.append(scores.masked_fill(~real[:, None, None, :], -1e4).log_softmax(-1))
    return torch.stack(found)


def relation_loss(student: Tensor, teacher: Tensor, real: Tensor) -> Tensor:
    """Σ over queries, keys, values, relation heads and real rows of KL(teacher ‖ student)."""
    kl = F.kl_div(student, teacher, log_target=True, reduction="none").sum(-1)  # (3, B, R, T)
    return (kl * real[None, :, None, :]).sum()


@contextlib.contextmanager
def last_qkv(model: nn.Module):
    """The last block's fused q, k, v projection output of the next forward pass, in a
    one-element list."""
    found: list[Tensor] = []
    attention = model.backbone.blocks[-1].attn
    handle = attention.qkv.register_forward_hook(lambda _, __, out: found.append(out))
    try:
        yield found
    finally:
        handle.remove()


class TeacherSignals(Objective):
    """Masked blocks as MaskedLM makes them, read by the student and the (frozen) teacher; the
    loss is T²·KL from the teacher's distribution at each masked position ("mlm") and/or
    KL from its last layer's relations at every real token ("relations")."""

    name = "distill"
    title = "general distillation"
    two_passes = True

    def __init__(self, masked: MaskedLM, teacher: nn.Module, relation_heads: int,
                 imitate: Imitate = "mlm", temperature: float = 1.0) -> None:
        self.masked, self.teacher = masked, teacher.eval().requires_grad_(False)
        self.imitation, self.temperature = IMITATIONS[imitate], temperature
        self.heads_used = (masked.head,) if self.imitation.distribution else ()
        self.relation_heads = relation_heads

    @property
    def traits(self) -> Traits:
        return Traits(attention="bidirectional", heads=self.heads_used, needs=("mask", "pad"))

    def predicted_fraction(self, rows: int, seq_len: int) -> float:
        return self.masked.predicted_fraction(rows, seq_len) if self.heads_used else 0.0

    def make_batch(self, tokens: Tensor, generator: torch.Generator, step: int = 0) -> Batch:
        batch = self.masked.make_batch(tokens, generator, step)
        if not self.heads_used:
            batch.predict_at = {}
        return batch

    def outputs(self, model, batch: Batch, unprojected: bool = False) -> dict[str, Tensor]:
        inputs = {**batch.model_inputs(), "predict_at": batch.predict_at}
        with last_qkv(model) as student_qkv:
            student = model(**inputs)
        with torch.no_grad(), last_qkv(self.teacher) as teacher_qkv:
            teacher = self.teacher(**inputs)
        found = {}
        if self.heads_used:
            (head,) = self.heads_used
            found.update(student=student[head], teacher=teacher[head])
        if self.imitation.relations:
            real = self._real(batch)
            found["relations"] = relation_loss(
                self._relations(model, student_qkv[0], real),
                self._relations(self.teacher, teacher_qkv[0], real), real)
        return found

    def _relations(self, model: nn.Module, qkv: Tensor, real: Tensor) -> Tensor:
        attention = model.backbone.blocks[-1].attn
        return relations(qkv, attention.head_counts, attention.head_dim, self.relation_heads,
                         real)

    @staticmethod
    def _real(batch: Batch) -> Tensor:
        segments = batch.mask.segment_ids
        return (torch.ones_like(batch.input_ids, dtype=torch.bool) if segments is None
                else segments > 0)

    def target_counts(self, batch: Batch) -> dict[str, Tensor]:
        counts = {}
        if self.heads_used:
            counts["mlm"] = (batch.targets != IGNORE_INDEX).sum()
        if self.imitation.relations:  # rows of relations: 3 kinds × heads × real tokens
            counts["relations"] = 3 * self.relation_heads * self._real(batch).sum()
        return counts

    def loss(self, outputs: dict[str, Tensor], batch: Batch) -> LossSum:
        counts, terms = self.target_counts(batch), {}
        if self.heads_used:
            targets = targets_at(batch.targets, batch.predict_at[self.masked.head])
            scored = targets != IGNORE_INDEX
            terms["mlm"] = (soft_label_loss(outputs["student"][scored],
                                            outputs["teacher"][scored], self.temperature),
                            counts["mlm"])
        if self.imitation.relations:
            terms["relations"] = (outputs["relations"], counts["relations"])
        return LossSum(terms)
