"""Output heads, each declaring what it reads (`accepts`, lmlab.model.selectors): a token head
reads chosen tokens, a sequence head chosen rows or a pooling of them, an answer head (extractive
QA) every position.

A token head runs at chosen `Positions` (None = everywhere): for MLM that skips the ~85% of
rows of the costliest matmul that carry no target. A vocabulary head can also stop short of
its decoder and return `Unprojected` features, which the loss (lmlab.objectives.losses)
projects and scores in one fused step (lmlab/kernels/linear_cross_entropy.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lmlab.config import ModelConfig
from lmlab.kernels.linear import Linear
from lmlab.model.generator import GeneratorHead
from lmlab.model.head import Head
from lmlab.model.layers import make_norm
from lmlab.model.selectors import Pooling, Positions, Rows


def soft_cap(logits: Tensor, cap: float) -> Tensor:
    """cap·tanh(logits / cap): logits kept within ±cap (Gemma 2); unchanged for cap 0."""
    return logits if not cap else cap * torch.tanh(logits / cap)


@dataclass
class Unprojected:
    """A vocabulary head's output short of its decoder: (N, d) features, the decoder and the
    logits' soft cap (0 = none)."""

    features: Tensor
    decoder: nn.Linear
    cap: float = 0.0

    def logits(self) -> Tensor:
        return soft_cap(self.decoder(self.features), self.cap)


class VocabularyHead(Head):
    """Features at the requested positions → a (tied) decoder to vocabulary logits, soft-capped
    when `cap` > 0."""

    decoder: Linear
    cap: float = 0.0

    def tie(self, embedding: nn.Embedding) -> None:
        self.decoder.weight = embedding.weight

    def start_from(self, pretrained: Mapping[str, nn.Module], embedding: nn.Embedding) -> None:
        """An untied decoder starts as a copy of the token embeddings (a tied one is them)."""
        if self.decoder.weight is not embedding.weight:
            with torch.no_grad():
                self.decoder.weight.copy_(embedding.weight)

    @classmethod
    def how_it_starts(cls, cfg: ModelConfig) -> str:
        return ("decoder tied to the token embeddings" if cfg.tie_embeddings
                else "decoder a copy of the token embeddings")

    def features(self, hidden: Tensor, at: Positions | None) -> Tensor:
        raise NotImplementedError

    def forward(self, hidden: Tensor, at: Positions | None = None,
                unprojected: bool = False) -> Tensor | Unprojected:
        features = self.features(hidden, at)
        if unprojected:
            return Unprojected(features.reshape(-1, features.shape[-1]), self.decoder, self.cap)
        return soft_cap(self.decoder(features), self.cap)


def read_tokens(hidden: Tensor, at: Positions | None) -> Tensor:
    """(B, T, d) hidden states, or (N, d) at `at`'s positions."""
    return hidden if at is None else at.read(hidden)


class LMHead(VocabularyHead):
    """Hidden state → vocabulary logits (GPT-2 / LLaMA style, no bias)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.decoder = Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.cap = cfg.logit_softcap

    def features(self, hidden: Tensor, at: Positions | None) -> Tensor:
        return read_tokens(hidden, at)


class MLMHead(VocabularyHead):
    """BERT's prediction head: dense → GELU → norm → (tied) decoder with an output bias."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.transform = Linear(cfg.d_model, cfg.d_model)
        self.norm = make_norm(cfg)
        self.decoder = Linear(cfg.d_model, cfg.vocab_size)
        self.cap = cfg.logit_softcap

    def features(self, hidden: Tensor, at: Positions | None) -> Tensor:
        return self.norm(F.gelu(self.transform(read_tokens(hidden, at))))

    @classmethod
    def how_it_starts(cls, cfg: ModelConfig) -> str:
        return f"transform and norm fresh, {super().how_it_starts(cfg)}, output bias zero"


class TaskTransform(nn.Module):
    """dense → GELU → norm, the transform ModernBERT's MLM head and task heads read the
    hidden states through (`cfg.head_transform`)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.dense = Linear(cfg.d_model, cfg.d_model)
        self.norm = make_norm(cfg)

    def forward(self, hidden: Tensor) -> Tensor:
        return self.norm(F.gelu(self.dense(hidden)))


def task_transform(cfg: ModelConfig) -> nn.Module:
    """What a token or answer head reads the hidden states through: ModernBERT's transform, or
    nothing (BERT)."""
    return TaskTransform(cfg) if cfg.head_transform else nn.Identity()


class SequenceHead(Head):
    """One prediction per row: a pooled hidden state → dense + tanh (BERT's pooler; dense →
    GELU → norm with `cfg.head_transform`) → dropout → `num_labels` scores (1 for
    regression). Next-sentence prediction is this head with two labels, so a pre-trained NSP
    pooler carries over into fine-tuning, as in BERT.

    Without a `pooler`, it is GPT's fine-tuning head (Radford et al. 2018) as Hugging Face's
    GPT-2 and Llama sequence classes have it: one bias-free linear layer on the pooled state
    (the last token's, after the final norm), with nothing before it, not even dropout.

    `at` says what to pool: None = the first position of every row; `Rows` = those rows'
    first position; `Pooling` = per-row weights of each position.
    """

    accepts = (Rows, Pooling, type(None))

    def __init__(self, cfg: ModelConfig, num_labels: int = 2, pooler: bool = True) -> None:
        super().__init__()
        self.pooler, self.squash, self.dropout = nn.Identity(), nn.Identity(), nn.Identity()
        if pooler:  # BERT's pooler is dense + tanh; ModernBERT pools through its transform
            self.pooler = TaskTransform(cfg) if cfg.head_transform else Linear(cfg.d_model,
                                                                               cfg.d_model)
            self.squash = nn.Identity() if cfg.head_transform else nn.Tanh()
            self.dropout = nn.Dropout(cfg.dropout)
        self.classifier = Linear(cfg.d_model, num_labels, bias=pooler)

    def forward(self, hidden: Tensor, at: Rows | Pooling | None = None) -> Tensor:
        pooled = hidden[:, 0] if at is None else at.read(hidden)  # (B, d)
        return self.classifier(self.dropout(self.squash(self.pooler(pooled))))

    def start_from(self, pretrained: Mapping[str, nn.Module], embedding: nn.Embedding) -> None:
        """The next-sentence head's pooler, when pre-training trained one and this head has
        one (BERT's fine-tuning)."""
        if "nsp" in pretrained and not isinstance(self.pooler, nn.Identity):
            self.pooler.load_state_dict(pretrained["nsp"].pooler.state_dict())

    @classmethod
    def how_it_starts(cls, cfg: ModelConfig) -> str:
        return "pooler and classifier fresh"


class TokenHead(Head):
    """A label per token (NER): (transform →) dropout → `num_labels` scores at the requested
    positions."""

    def __init__(self, cfg: ModelConfig, num_labels: int = 2) -> None:
        super().__init__()
        self.transform = task_transform(cfg)
        self.dropout = nn.Dropout(cfg.dropout)
        self.classifier = Linear(cfg.d_model, num_labels)

    def forward(self, hidden: Tensor, at: Positions | None = None) -> Tensor:
        return self.classifier(self.dropout(self.transform(read_tokens(hidden, at))))


class AnswerHead(Head):
    """Extractive QA: a start and an end score at every position, (B, T, 2), from which the
    answer span is read."""

    accepts = (type(None),)

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.transform = task_transform(cfg)
        self.outputs = Linear(cfg.d_model, 2)

    def forward(self, hidden: Tensor, at: None = None) -> Tensor:
        return self.outputs(self.transform(hidden))


class DiscriminatorHead(Head):
    """ELECTRA's discriminator: dense → activation → one score per token, (B, T, 1) or (N, 1),
    the logit that the token was replaced (Clark et al. 2020; HF `ElectraDiscriminatorPredictions`,
    exact GELU as its BERT-family configs).

    Its score starts at the logit of `prior`, the share of tokens expected replaced (as a
    detector's bias starts at its class prior; Lin et al. 2017). From a zero bias, AdamW
    reached the base rate by turning every token's final hidden state into one vector, which
    fine-tuning cannot read; the prior spares some seeds, Muon spared all three measured
    (benchmarks/results/rtd_start.json)."""

    def __init__(self, cfg: ModelConfig, prior: float = 0.5) -> None:
        super().__init__()
        if not 0 <= prior <= 1:
            raise ValueError(f"the replaced share a discriminator starts at must lie in [0, 1], "
                             f"got {prior}")
        self.prior = min(max(prior, 1e-4), 1 - 1e-4)  # a finite logit at the ends
        self.transform = Linear(cfg.d_model, cfg.d_model)
        self.score = Linear(cfg.d_model, 1)

    def initialise(self) -> None:
        nn.init.constant_(self.score.bias, math.log(self.prior / (1 - self.prior)))

    def forward(self, hidden: Tensor, at: Positions | None = None) -> Tensor:
        return self.score(F.gelu(self.transform(read_tokens(hidden, at))))


# Heads by the name objectives and batches use for them.
HEADS: dict[str, type[Head]] = {
    "lm": LMHead, "mlm": MLMHead, "nsp": SequenceHead,  # pre-training
    "rtd": DiscriminatorHead, "generator": GeneratorHead,  # replaced-token detection
    "classify": SequenceHead, "tag": TokenHead, "answer": AnswerHead,  # fine-tuning
}


def pools(name: str) -> bool:
    """Whether the head called `name` reads one pooled vector per row (a sequence head), so
    that how a run pools matters to it."""
    return Pooling in HEADS[name].accepts


def make_head(name: str, cfg: ModelConfig, **options) -> Head:
    """The head called `name`; `options` are its own settings (e.g. num_labels)."""
    if name not in HEADS:
        raise ValueError(f"unknown head {name!r}; choose from {sorted(HEADS)}")
    return HEADS[name](cfg, **options)
