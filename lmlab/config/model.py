"""Typed, frozen model configuration: the few knobs that choose an architecture.

Derived sizes (key/value heads, head dimension, feed-forward width) are computed from the
width and head count unless an imported architecture fixes them (`n_kv_heads`, `head_size`,
`ffn_size`, None = derived), so a configuration of lmlab's own cannot contradict itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Literal

Norm = Literal["layernorm", "rmsnorm"]
NormPlacement = Literal["pre", "post"]
PositionEncoding = Literal["learned", "rotary"]
Activation = Literal["gelu", "gelu_tanh", "swiglu", "geglu", "relu2"]

GATED_ACTIVATIONS = ("swiglu", "geglu")
# Sizes derived from the width and head count unless an imported architecture fixes them.
SIZE_OVERRIDES = ("n_kv_heads", "head_size", "ffn_size")
# Fields that runs saved before they existed did not write: `to_dict` leaves them out at their
# defaults, so that such a run still compares equal to its own configuration on resuming.
LATER_FIELDS = (*SIZE_OVERRIDES, "qk_norm", "logit_softcap", "zero_init_projections",
                "embedding_norm", "head_transform", "unet_skips",
                "value_embeddings", "bigram_hash")


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int
    n_layers: int = 2
    d_model: int = 64
    n_heads: int = 2
    max_seq_len: int = 128
    norm: Norm = "layernorm"
    norm_placement: NormPlacement = "pre"
    positions: PositionEncoding = "learned"
    activation: Activation = "gelu"
    bias: bool = True
    type_vocab_size: int = 0  # 0 = no token-type (segment A/B) embeddings
    tie_embeddings: bool = True
    dropout: float = 0.0
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    init_std: float = 0.02
    n_kv_heads: int | None = None  # grouped-query attention (Ainslie et al. 2023)
    head_size: int | None = None
    ffn_size: int | None = None
    # Training-recipe switches (modded-nanogpt, Jordan et al. 2024; Gemma 2 for the cap):
    qk_norm: bool = False  # RMS-normalise each head's queries and keys before attending
    logit_softcap: float = 0.0  # > 0: vocabulary logits become cap·tanh(logits / cap)
    zero_init_projections: bool = False  # residual-branch outputs start at zero
    # the stream after block i < n_layers // 2 joins the input of block n_layers-1-i, scaled by
    # a learnt weight per skip (a U-net over depth)
    unet_skips: bool = False
    # tables of value embeddings: table j is added to the attention values of layers j and
    # n_layers-1-j, times a learnt scalar per layer (at most n_layers // 2 tables)
    value_embeddings: int = 0
    # rows of a table indexed by a hash of each token and the one before it, added to the token
    # embedding (0 = no table)
    bigram_hash: int = 0
    # ModernBERT's layout (Warner et al. 2024): the embeddings normalised once, so a pre-norm
    # model's first block reads them without an attention norm of its own; and task heads
    # (classify, tag, span) reading through a dense → GELU → norm transform, as its MLM head
    # does, instead of BERT's tanh pooler.
    embedding_norm: bool = False
    head_transform: bool = False

    def __post_init__(self) -> None:
        choices = {
            "norm": Norm.__args__,
            "norm_placement": NormPlacement.__args__,
            "positions": PositionEncoding.__args__,
            "activation": Activation.__args__,
        }
        for name, allowed in choices.items():
            value = getattr(self, name)
            if value not in allowed:
                raise ValueError(f"{name}={value!r} is not one of {', '.join(allowed)}")
        for name in ("vocab_size", "n_layers", "d_model", "n_heads", "max_seq_len"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        for name in SIZE_OVERRIDES:
            if getattr(self, name) is not None and getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.n_heads % self.kv_heads:
            raise ValueError(f"n_kv_heads={self.n_kv_heads} does not divide n_heads={self.n_heads}")
        if self.head_size is None and self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        if self.positions == "rotary" and self.head_dim % 2:
            raise ValueError(f"rotary positions need an even head dimension, got {self.head_dim}")
        if not (math.isfinite(self.logit_softcap) and self.logit_softcap >= 0):
            raise ValueError(f"logit_softcap must be 0 (off) or positive, got "
                             f"{self.logit_softcap}")
        if self.unet_skips and self.n_layers < 2:
            raise ValueError(f"unet_skips needs at least 2 layers, got n_layers={self.n_layers}")
        if not 0 <= self.value_embeddings <= self.n_layers // 2:
            raise ValueError(f"value_embeddings must be between 0 and n_layers // 2 = "
                             f"{self.n_layers // 2}, got {self.value_embeddings}")
        if self.bigram_hash < 0 or self.bigram_hash == 1:  # one row for hashes, one for none
            raise ValueError(f"bigram_hash must be 0 (off) or at least 2 rows, got "
                             f"{self.bigram_hash}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")

    @property
    def kv_heads(self) -> int:
        """Heads of keys and values; each serves n_heads / kv_heads query heads."""
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads if self.head_size is None else self.head_size

    @property
    def gated(self) -> bool:
        return self.activation in GATED_ACTIVATIONS

    @property
    def ffn_dim(self) -> int:
        """4·d for plain MLPs; for gated ones 2/3 of that (same parameter count, as in
        Shazeer 2020 / LLaMA), rounded up to a multiple of 64 for efficient matmuls."""
        if self.ffn_size is not None:
            return self.ffn_size
        if not self.gated:
            return 4 * self.d_model
        return -(-(8 * self.d_model // 3) // 64) * 64

    def with_changes(self, **changes) -> ModelConfig:
        unknown = set(changes) - {f.name for f in fields(self)}
        if unknown:
            raise ValueError(f"unknown model config field(s): {', '.join(sorted(unknown))}")
        return replace(self, **changes)

    def to_dict(self) -> dict:
        """Every field but the LATER_FIELDS left at their defaults."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.name not in LATER_FIELDS or getattr(self, f.name) != f.default}
