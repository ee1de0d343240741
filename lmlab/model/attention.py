"""Multi-head self-attention with a KV cache. The product itself, softmax(q·kᵀ/√d)·v under the
mask's policy, is lmlab.kernels.attention.attend, which picks the fastest route for the device
(SDPA, plain products, FlexAttention); this file says what is computed."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from lmlab.config import ModelConfig
from lmlab.kernels.attention import attend
from lmlab.kernels.linear import Linear
from lmlab.model.layers import apply_rotary, gather_rows, value_table
from lmlab.model.masks import MaskSpec


class KVCache:
    """Preallocated keys and values for incremental decoding.

    Every layer writes its new keys/values at `length`; the model advances `length` once per
    forward. Prefilling a prompt (bidirectional for prefix-LM models) is one forward. It holds
    only the key/value heads: grouped-query attention shrinks it by n_heads / kv_heads.
    """

    def __init__(self, cfg: ModelConfig, batch_size: int, max_len: int,
                 device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32) -> None:
        shape = (cfg.n_layers, batch_size, cfg.kv_heads, max_len, cfg.head_dim)
        self.keys = torch.zeros(shape, device=device, dtype=dtype)
        self.values = torch.zeros(shape, device=device, dtype=dtype)
        self.length = 0
        self.last_ids: Tensor | None = None  # (B,) each row's latest token: bigrams read it

    @property
    def max_len(self) -> int:
        return self.keys.shape[3]

    def update(self, layer: int, keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
        end = self.length + keys.shape[2]
        if end > self.max_len:
            raise ValueError(f"KV cache full: {end} positions needed, {self.max_len} allocated")
        self.keys[layer, :, :, self.length:end] = keys
        self.values[layer, :, :, self.length:end] = values
        return self.keys[layer, :, :, :end], self.values[layer, :, :, :end]

    def advance(self, input_ids: Tensor) -> None:
        """Past the (B, T) tokens just read."""
        self.length += input_ids.shape[1]
        self.last_ids = input_ids[:, -1]


class SelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig, layer_index: int) -> None:
        super().__init__()
        self.head_counts = (cfg.n_heads, cfg.kv_heads, cfg.kv_heads)  # of q, k, v
        self.head_dim = cfg.head_dim
        self.layer_index = layer_index
        self.dropout = cfg.dropout
        self.qkv = Linear(cfg.d_model, sum(self.head_counts) * cfg.head_dim, bias=cfg.bias)
        self.out = Linear(cfg.n_heads * cfg.head_dim, cfg.d_model, bias=cfg.bias)
        # QK-norm (Henry et al. 2020; OLMo 2, Qwen3): bounded attention logits, so a higher
        # learning rate stays stable. One learned scale per head dimension, shared by heads.
        self.qk_norms = (nn.ModuleList(nn.RMSNorm(cfg.head_dim, eps=cfg.norm_eps)
                                       for _ in "qk") if cfg.qk_norm else None)
        # Value embeddings (modded-nanogpt): a token table of their own added to the values,
        # times a learnt scalar that starts at 0.5, modded-nanogpt's weight for them.
        self.value_scale = (nn.Parameter(torch.tensor(0.5))
                            if value_table(cfg, layer_index) is not None else None)

    def forward(self, x: Tensor, mask: MaskSpec, rotary: tuple[Tensor, Tensor] | None,
                cache: KVCache | None = None, keep: Tensor | None = None,
                values: Tensor | None = None) -> Tensor:
        """(B, T, d) → (B, T, d); with `keep` (flat positions) → (N, d) at those positions
        only, after attention, which reads every position's keys and values. `values`:
        the layer's value embeddings, (B, T, kvh·hs), when it reads a table."""
        batch, length, _ = x.shape
        # The heads of q, k and v side by side, split before the heads move ahead of T into
        # (B, heads, T, d) views: split after, backward would copy the joined gradients once
        # more to undo the move (one copy a layer, seen in the compiled backward graph).
        heads = self.qkv(x).view(  # (B, T, nh + 2·kvh, hs)
            batch, length, sum(self.head_counts), self.head_dim)
        q, k, v = (part.transpose(1, 2)  # (B, nh, T, hs); k, v: (B, kvh, T, hs)
                   for part in heads.split(self.head_counts, dim=2))
        if self.qk_norms is not None:
            q, k = self.qk_norms[0](q), self.qk_norms[1](k)
        if rotary is not None:
            q, k = apply_rotary(q, *rotary), apply_rotary(k, *rotary)
        if self.value_scale is not None:  # v + λ·ve, each token's own vector
            v = v + self.value_scale * values.view(  # (B, T, kvh·hs) → (B, kvh, T, hs)
                batch, length, -1, self.head_dim).transpose(1, 2)
        if cache is not None:
            k, v = cache.update(self.layer_index, k, v)  # (B, kvh, S, hs): the cached and new
        y = attend(q, k, v, mask, self.dropout if self.training else 0.0)
        y = y.transpose(1, 2).reshape(batch, length, -1)  # (B, nh, T, hs) → (B, T, nh·hs)
        return self.out(gather_rows(y, keep))  # (B, T, d), or (N, d) at `keep`
