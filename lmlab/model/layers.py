"""Small building blocks, each chosen by one config field: norms, MLPs, rotary positions; and
the row gather that heads and the last block share."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lmlab.config import ModelConfig
from lmlab.kernels.linear import Linear


def gather_rows(hidden: Tensor, at: Tensor | None) -> Tensor:
    """(B, T, d) → (N, d) at flat positions `at`, or unchanged when `at` is None."""
    return hidden if at is None else hidden.reshape(-1, hidden.shape[-1])[at]


def value_table(cfg: ModelConfig, layer: int) -> int | None:
    """The value-embedding table layer `layer` reads: table j feeds layers j and
    n_layers-1-j (modded-nanogpt: the first and last layers share a table), or None."""
    table = min(layer, cfg.n_layers - 1 - layer)
    return table if table < cfg.value_embeddings else None


# modded-nanogpt's multipliers for hashing a bigram: the current token's, the previous one's
BIGRAM_MULTIPLIERS = (36313, 27191)


def bigram_rows(input_ids: Tensor, table_size: int, previous: Tensor | None = None,
                segments: Tensor | None = None) -> Tensor:
    """(B, T) ids → (B, T) rows of a bigram hash table: each token and the one before it,
    hashed as modded-nanogpt hashes them into rows 0..table_size-2; row table_size-1 for a
    token with no earlier token in its document. That is the first token, unless `previous`
    (B,) holds the token before these (a cache's), and each first token after a change of
    `segments` (the mask's segment ids, (B, S), the inputs' the last T of S)."""
    length = input_ids.shape[1]
    first = input_ids[:, :1] if previous is None else previous[:, None]  # (B, 1)
    before = torch.cat((first, input_ids[:, :-1]), dim=1)  # (B, T): each token's predecessor
    now_weight, before_weight = BIGRAM_MULTIPLIERS
    rows = torch.bitwise_xor(now_weight * input_ids, before_weight * before) % (table_size - 1)
    starts = torch.zeros_like(input_ids, dtype=torch.bool)
    if segments is not None:
        edges = segments[:, -length - 1:]  # (B, T + 1), or (B, T) when nothing came before
        changed = edges[:, 1:] != edges[:, :-1]
        starts[:, length - changed.shape[1]:] = changed
    if previous is None:
        starts[:, 0] = True
    return rows.masked_fill(starts, table_size - 1)


def make_norm(cfg: ModelConfig) -> nn.Module:
    if cfg.norm == "rmsnorm":
        return nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
    return nn.LayerNorm(cfg.d_model, eps=cfg.norm_eps, bias=cfg.bias)


def gelu_tanh(x: Tensor) -> Tensor:
    return F.gelu(x, approximate="tanh")


def relu_squared(x: Tensor) -> Tensor:
    """ReLU(x)² (So et al. 2021, Primer), as modded-nanogpt's MLP uses it."""
    return F.relu(x).square()


# The non-linearity of each MLP kind; gated kinds apply it to the gate half only.
ACTIVATIONS = {"gelu": F.gelu, "gelu_tanh": gelu_tanh, "swiglu": F.silu, "geglu": F.gelu,
               "relu2": relu_squared}


class MLP(nn.Module):
    """d → ffn → d. Gated variants (Shazeer 2020) project to a gate and a value at once."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.gated = cfg.gated
        self.act = ACTIVATIONS[cfg.activation]
        self.up = Linear(cfg.d_model, cfg.ffn_dim * (2 if cfg.gated else 1), bias=cfg.bias)
        self.down = Linear(cfg.ffn_dim, cfg.d_model, bias=cfg.bias)

    def forward(self, x: Tensor) -> Tensor:
        h = self.up(x)
        if self.gated:
            gate, value = h.chunk(2, dim=-1)
            h = self.act(gate) * value
        else:
            h = self.act(h)
        return self.down(h)


class Rotary(nn.Module):
    """Rotary position embedding (Su et al. 2021), half-split layout as in GPT-NeoX/LLaMA."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        exponents = torch.arange(0, cfg.head_dim, 2, dtype=torch.float32) / cfg.head_dim
        self.register_buffer("inv_freq", cfg.rope_theta**-exponents, persistent=False)

    def forward(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        """cos, sin of shape (B, 1, T, head_dim) for (B, T) positions, or (1, T, head_dim)
        for (T,) positions that every row shares (computed once, not once a row)."""
        angles = positions[..., None].float() * self.inv_freq  # (..., T, head_dim/2)
        angles = torch.cat((angles, angles), dim=-1).unsqueeze(-3)
        return angles.cos(), angles.sin()


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    first, second = x.chunk(2, dim=-1)
    rotated = torch.cat((-second, first), dim=-1)
    return (x * cos + rotated * sin).to(x.dtype)
