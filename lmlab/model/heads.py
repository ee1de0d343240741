"""Output heads, each declaring its kind: it predicts per token, per sequence, or per span.

A token head runs at chosen positions (`at`, flat indices into B·T; None = everywhere): for
MLM that skips the ~85% of rows of the costliest matmul that carry no target. A vocabulary
head can also stop short of its decoder and return `Unprojected` features, which a loss
projects and scores in one fused step (lmlab/model/linear_cross_entropy.py). A sequence head's
`at` selects rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch.nn.functional as F
from torch import Tensor, nn

from lmlab.config import ModelConfig
from lmlab.model.layers import make_norm
from lmlab.model.linear import Linear
from lmlab.model.linear_cross_entropy import linear_cross_entropy


def gather_rows(hidden: Tensor, at: Tensor | None) -> Tensor:
    """(B, T, d) → (N, d) at flat positions `at`, or unchanged when `at` is None."""
    return hidden if at is None else hidden.reshape(-1, hidden.shape[-1])[at]


@dataclass
class Unprojected:
    """A vocabulary head's output short of its decoder: (N, d) features and the decoder."""

    features: Tensor
    decoder: nn.Linear

    def logits(self) -> Tensor:
        return self.decoder(self.features)

    def cross_entropy(self, targets: Tensor) -> tuple[Tensor, Tensor]:
        """(summed loss, per-row losses) against `targets` (N,); see linear_cross_entropy."""
        return linear_cross_entropy(self.features, self.decoder.weight, self.decoder.bias,
                                    targets)


HeadKind = Literal["token", "sequence", "span"]


class Head(nn.Module):
    """An output head over the backbone's hidden states (B, T, d)."""

    kind: HeadKind = "token"

    def tie(self, embedding: nn.Embedding) -> None:
        """Share the input embedding, when the model ties it; only vocabulary heads do."""


class VocabularyHead(Head):
    """Features at the requested positions → a (tied) decoder to vocabulary logits."""

    decoder: Linear

    def tie(self, embedding: nn.Embedding) -> None:
        self.decoder.weight = embedding.weight

    def features(self, hidden: Tensor, at: Tensor | None) -> Tensor:
        raise NotImplementedError

    def forward(self, hidden: Tensor, at: Tensor | None = None,
                unprojected: bool = False) -> Tensor | Unprojected:
        features = self.features(hidden, at)
        if unprojected:
            return Unprojected(features.reshape(-1, features.shape[-1]), self.decoder)
        return self.decoder(features)


class LMHead(VocabularyHead):
    """Hidden state → vocabulary logits (GPT-2 / LLaMA style, no bias)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.decoder = Linear(cfg.d_model, cfg.vocab_size, bias=False)

    def features(self, hidden: Tensor, at: Tensor | None) -> Tensor:
        return gather_rows(hidden, at)


class MLMHead(VocabularyHead):
    """BERT's prediction head: dense → GELU → norm → (tied) decoder with an output bias."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.transform = Linear(cfg.d_model, cfg.d_model)
        self.norm = make_norm(cfg)
        self.decoder = Linear(cfg.d_model, cfg.vocab_size)

    def features(self, hidden: Tensor, at: Tensor | None) -> Tensor:
        return self.norm(F.gelu(self.transform(gather_rows(hidden, at))))


class NSPHead(Head):
    """Next-sentence prediction from the first ([CLS]) position: pooler (dense + tanh) → 2."""

    kind = "sequence"

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.pooler = Linear(cfg.d_model, cfg.d_model)
        self.classifier = Linear(cfg.d_model, 2)

    def forward(self, hidden: Tensor, at: Tensor | None = None) -> Tensor:
        cls = hidden[:, 0] if at is None else hidden[at, 0]  # `at` selects rows here
        return self.classifier(self.pooler(cls).tanh())


# Heads by the name objectives and batches use for them.
HEADS: dict[str, type[Head]] = {"lm": LMHead, "mlm": MLMHead, "nsp": NSPHead}


def make_head(name: str, cfg: ModelConfig) -> Head:
    if name not in HEADS:
        raise ValueError(f"unknown head {name!r}; choose from {sorted(HEADS)}")
    return HEADS[name](cfg)


def selects_rows(name: str) -> bool:
    """Whether the head called `name` is given rows, not flat token positions, as `at`."""
    return HEADS[name].kind == "sequence"
