"""Output heads, each declaring its kind: it predicts per token, per sequence, or per span.

A token head runs at chosen positions (`at`, flat indices into B·T; None = everywhere): for
MLM that skips the ~85% of rows of the costliest matmul that carry no target. A vocabulary
head can also stop short of its decoder and return `Unprojected` features, which a loss
projects and scores in one fused step (lmlab/kernels/linear_cross_entropy.py). A sequence head's
`at` selects rows or gives pooling weights; a span head scores every position.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch.nn.functional as F
from torch import Tensor, nn

from lmlab.config import ModelConfig
from lmlab.kernels.linear import Linear
from lmlab.kernels.linear_cross_entropy import linear_cross_entropy
from lmlab.model.layers import gather_rows, make_norm


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


class SequenceHead(Head):
    """One prediction per row: a pooled hidden state → dense + tanh (BERT's pooler) → dropout
    → `num_labels` scores (1 for regression). Next-sentence prediction is this head with two
    labels, so a pre-trained NSP pooler carries over into fine-tuning, as in BERT.

    `at` says what to pool: None = the first position of every row; a 1-D tensor = those rows'
    first position; a (B, T) float tensor = per-row pooling weights summing to 1 (one-hot at
    [CLS] or at the last token, or uniform over the text for mean pooling).
    """

    kind = "sequence"

    def __init__(self, cfg: ModelConfig, num_labels: int = 2) -> None:
        super().__init__()
        self.pooler = Linear(cfg.d_model, cfg.d_model)
        self.dropout = nn.Dropout(cfg.dropout)
        self.classifier = Linear(cfg.d_model, num_labels)

    def forward(self, hidden: Tensor, at: Tensor | None = None) -> Tensor:
        if at is None:
            pooled = hidden[:, 0]
        elif at.ndim == 1:
            pooled = hidden[at, 0]
        else:
            pooled = (at.unsqueeze(-1).to(hidden.dtype) * hidden).sum(dim=1)  # (B, d)
        return self.classifier(self.dropout(self.pooler(pooled).tanh()))


class TokenHead(Head):
    """A label per token (NER): dropout → `num_labels` scores at the requested positions."""

    def __init__(self, cfg: ModelConfig, num_labels: int = 2) -> None:
        super().__init__()
        self.dropout = nn.Dropout(cfg.dropout)
        self.classifier = Linear(cfg.d_model, num_labels)

    def forward(self, hidden: Tensor, at: Tensor | None = None) -> Tensor:
        return self.classifier(self.dropout(gather_rows(hidden, at)))


class SpanHead(Head):
    """Extractive QA: a start and an end score at every position, (B, T, 2)."""

    kind = "span"

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.outputs = Linear(cfg.d_model, 2)

    def forward(self, hidden: Tensor, at: Tensor | None = None) -> Tensor:
        if at is not None:
            raise ValueError("a span head scores every position; it takes no `at`")
        return self.outputs(hidden)


# Heads by the name objectives and batches use for them.
HEADS: dict[str, type[Head]] = {
    "lm": LMHead, "mlm": MLMHead, "nsp": SequenceHead,  # pre-training
    "classify": SequenceHead, "tag": TokenHead, "span": SpanHead,  # fine-tuning
}


def make_head(name: str, cfg: ModelConfig, **options) -> Head:
    """The head called `name`; `options` are its own settings (e.g. num_labels)."""
    if name not in HEADS:
        raise ValueError(f"unknown head {name!r}; choose from {sorted(HEADS)}")
    return HEADS[name](cfg, **options)


def selects_rows(name: str) -> bool:
    """Whether the head called `name` is given rows, not flat token positions, as `at`."""
    return HEADS[name].kind == "sequence"
