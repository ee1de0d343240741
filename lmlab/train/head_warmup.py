"""A head warm-up for continued pre-training: the heads a `--init` run lacks train alone first.

A new head starts far from what the trained body expects (all-MiniLM-L6-v2 given a masked-LM
head begins at ~10.9 nats), and its first gradients, passed back through the body at the full
learning rate, can wreck what the body knew in a few steps. So for the first steps only the new
heads learn; the body, and the heads the source already had, are frozen (no gradient: the
optimizer leaves them and their moments alone). A weight a new head shares with the body (a
decoder tied to the token embeddings) belongs to the body and stays frozen.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from torch import nn


@dataclass(frozen=True)
class HeadWarmup:
    """Steps [0, `steps`) train only the new heads; `frozen` is everything else."""

    frozen: tuple[nn.Parameter, ...]
    steps: int

    @classmethod
    def of(cls, model: nn.Module, new_heads: Iterable[str], steps: int) -> HeadWarmup:
        """Freeze every parameter of `model` but those that belong to `new_heads` alone (no
        warm-up when they own none)."""
        body = {id(p) for p in model.backbone.parameters()}
        learning = {id(p) for name in new_heads for p in model.heads[name].parameters()
                    if id(p) not in body}
        if not learning:  # a new head made only of tied weights: nothing to warm up
            return cls((), 0)
        return cls(tuple(p for p in model.parameters() if id(p) not in learning), steps)

    def at(self, step: int) -> None:
        """Freeze or release the body for the update made at `step` (a resume lands right)."""
        everything = step >= self.steps
        if self.frozen and self.frozen[0].requires_grad != everything:
            for parameter in self.frozen:
                parameter.requires_grad_(everything)

    def ends_at(self, step: int) -> bool:
        """Whether `step` steps done completes the warm-up (when validation gives the start
        the body's own training is measured against)."""
        return self.steps > 0 and step == self.steps
