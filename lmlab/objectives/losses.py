"""Targets and losses: summed cross-entropies with their target counts (LossSum), so that the
loop can normalise by the global count across micro-batches and ranks."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor

from lmlab.kernels.linear_cross_entropy import IGNORE_INDEX, linear_cross_entropy
from lmlab.model.heads import Unprojected
from lmlab.model.selectors import Positions


@dataclass
class LossSum:
    """Summed losses with their target counts, one term per quantity ("mlm", "nsp", ...).

    The objective's loss is the sum over terms of term_sum / term_count, each count taken over
    all micro-batches and ranks of a step.
    """

    terms: dict[str, tuple[Tensor, Tensor]]
    details: dict[str, tuple[Tensor, Tensor]] = field(default_factory=dict)  # reported only

    def mean(self, counts: dict[str, Tensor] | None = None) -> Tensor:
        """Σ sum/count; pass `counts` to normalise by global counts instead of local ones."""
        total = 0.0
        for name, (loss_sum, count) in self.terms.items():
            denominator = counts[name] if counts is not None else count
            total = total + loss_sum / denominator.clamp(min=1)
        return total


def cross_entropy(output: Tensor | Unprojected, targets: Tensor) -> tuple[Tensor, Tensor]:
    """(summed loss, per-row losses) of a vocabulary head's output against flat `targets`,
    IGNORE_INDEX rows counting 0. Only the sum is sure to carry a gradient: an Unprojected
    output is scored by the fused projection + cross-entropy (linear_cross_entropy), unless
    its logits are capped, which the fused kernel does not do."""
    if isinstance(output, Unprojected):
        if not output.cap:
            return linear_cross_entropy(output.features, output.decoder.weight,
                                        output.decoder.bias, targets)
        output = output.logits()
    logits = output.reshape(-1, output.shape[-1]).float()
    losses = F.cross_entropy(logits, targets, ignore_index=IGNORE_INDEX, reduction="none")
    return losses.sum(), losses


def empty_sum(output: Tensor | Unprojected) -> Tensor:
    """The sum of a head's output on no position: zero, but joined to every weight the head
    would use."""
    if isinstance(output, Unprojected):
        return cross_entropy(output, torch.empty(0, dtype=torch.long,
                                                 device=output.features.device))[0]
    return output.sum()


def token_loss_sum(output: Tensor | Unprojected, targets: Tensor,
                   at: Positions | None) -> tuple[Tensor, Tensor]:
    """Summed cross-entropy of a head's output against `targets` (B, T) at positions `at`
    (None: every position), and the number of targets."""
    flat_targets = targets_at(targets, at)
    return cross_entropy(output, flat_targets)[0], (flat_targets != IGNORE_INDEX).sum()


def targets_at(targets: Tensor, at: Positions | None) -> Tensor:
    """The flat targets of (B, T) `targets` at positions `at`, or at every position."""
    return targets.reshape(-1) if at is None else at.read(targets)


def next_token_targets(tokens: Tensor, segment_ids: Tensor) -> Tensor:
    """targets[i] = tokens[i+1] where i+1 lies in the same (non-padding) document."""
    targets = torch.full_like(tokens, IGNORE_INDEX)
    same_document = (segment_ids[:, 1:] == segment_ids[:, :-1]) & (segment_ids[:, 1:] > 0)
    targets[:, :-1] = torch.where(same_document, tokens[:, 1:], IGNORE_INDEX)
    return targets
