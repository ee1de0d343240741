"""Multi-head self-attention with a KV cache, through SDPA or, where faster, a plain one; on a
GPU, policies that need a mask (packed documents, prefix LM, span corruption) go through
FlexAttention's block masks instead of a dense boolean mask."""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lmlab.config import ModelConfig
from lmlab.model.layers import apply_rotary, gather_rows
from lmlab.model.linear import Linear
from lmlab.model.masks import MaskSpec

# Training on CPU, for short sequences a plain product → fp32 softmax → product beats PyTorch's
# fused attention kernel, forward + backward (2 cores, 32 × 4 heads × 128 positions × 64 a
# layer): in bf16 17 ms against 40 ms, in fp32 11-12 ms against 15-17 ms. Beyond this many keys
# the fused kernel's memory behaviour wins: in fp32 they are level at 256 and the fused kernel
# is 1.4x faster at 512; in bf16 level at 512 and 3x faster at 1024. Without gradients
# (evaluation, decoding) the fused kernel is the faster one at every length measured.
EXPLICIT_MAX_KEYS = {torch.bfloat16: 256, torch.float32: 128}
# Devices where a masked policy runs through compiled FlexAttention: its kernels skip the
# blocks no query may see. On CPU it has no backward pass, so there SDPA takes a dense mask.
FLEX_DEVICES = frozenset({"cuda"})


def attend_under(q: Tensor, k: Tensor, v: Tensor, mask: MaskSpec, dropout_p: float) -> Tensor:
    """Attention under `mask`'s policy by the fastest route for the device: no mask or
    `is_causal` where the policy allows, else FlexAttention's block mask (on FLEX_DEVICES,
    without dropout, which it lacks) or a dense mask."""
    query_len, key_len = q.shape[2], k.shape[2]
    if mask.needs_mask(query_len, key_len) and q.device.type in FLEX_DEVICES and not dropout_p:
        return flex_attend(q, k, v, mask.block_mask(query_len, key_len))
    attn_mask, is_causal = mask.sdpa_arguments(query_len, key_len)
    return attend(q, k, v, attn_mask, is_causal, dropout_p)


def flex_attend(q: Tensor, k: Tensor, v: Tensor, block_mask) -> Tensor:
    """softmax(q·kᵀ/√d)·v over the pairs `block_mask` allows, by FlexAttention: compiled into
    one fused kernel on a GPU, eager elsewhere (forward only)."""
    from torch.nn.attention.flex_attention import flex_attention

    run = _compiled_flex_attention() if q.device.type == "cuda" else flex_attention
    return run(q, k, v, block_mask=block_mask, enable_gqa=_grouped(q, k))


@functools.cache
def _compiled_flex_attention():
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=False)


def attend(q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None, is_causal: bool,
           dropout_p: float) -> Tensor:
    """softmax(q·kᵀ/√d + mask)·v over (B, H, T, head_dim), by the faster route here. Keys and
    values may have fewer heads than queries (grouped-query attention): each serves a group of
    consecutive query heads."""
    if (q.device.type == "cpu" and q.requires_grad and torch.is_grad_enabled()
            and k.shape[2] <= EXPLICIT_MAX_KEYS.get(q.dtype, 0)):
        return _explicit_attention(q, k, v, attn_mask, is_causal, dropout_p)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal,
                                          dropout_p=dropout_p, enable_gqa=_grouped(q, k))


def _grouped(q: Tensor, k: Tensor) -> bool:
    return q.shape[1] != k.shape[1]


def _repeat_heads(kv: Tensor, group_size: int) -> Tensor:
    """(B, kv_heads, S, d) → (B, kv_heads·group_size, S, d), each head repeated for its group."""
    return kv.repeat_interleave(group_size, dim=1)


def _explicit_attention(q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None,
                        is_causal: bool, dropout_p: float) -> Tensor:
    if _grouped(q, k):
        group_size = q.shape[1] // k.shape[1]
        k, v = _repeat_heads(k, group_size), _repeat_heads(v, group_size)
    batch, heads, query_len, width = q.shape
    key_len = k.shape[2]
    q, k, v = (t.reshape(batch * heads, -1, width) for t in (q, k, v))
    if is_causal:  # the mask added inside the product: no separate pass forward or backward
        bias = (causal_bias if torch.compiler.is_compiling() else _kept_causal_bias)(
            query_len, key_len, q.dtype, q.device)  # a compiled graph holds its own
        scores = torch.baddbmm(bias, q, k.transpose(1, 2), alpha=width**-0.5)
    else:
        scores = torch.bmm(q * width**-0.5, k.transpose(1, 2))
    if attn_mask is not None:  # broadcast over the 4-d view of the scores, copied nowhere
        scores = scores.view(batch, heads, query_len, key_len).masked_fill(
            ~attn_mask, float("-inf")).view(batch * heads, query_len, key_len)
    weights = torch.softmax(scores, -1, dtype=torch.float32)  # accumulated in fp32
    if dropout_p:
        weights = F.dropout(weights, dropout_p)
    return torch.bmm(weights.to(v.dtype), v).view(batch, heads, query_len, width)


def causal_bias(query_len: int, key_len: int, dtype: torch.dtype, device: torch.device) -> Tensor:
    """0 where a query may see a key, -inf after it; queries are the last of the keys'
    positions, as everywhere in lmlab."""
    later = torch.ones(query_len, key_len, dtype=torch.bool, device=device).triu(
        key_len - query_len + 1)
    return torch.zeros(query_len, key_len, dtype=dtype, device=device).masked_fill(
        later, float("-inf"))


_kept_causal_bias = functools.lru_cache(maxsize=16)(causal_bias)


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

    def advance(self, count: int) -> None:
        self.length += count


class SelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig, layer_index: int) -> None:
        super().__init__()
        self.head_counts = (cfg.n_heads, cfg.kv_heads, cfg.kv_heads)  # of q, k, v
        self.head_dim = cfg.head_dim
        self.layer_index = layer_index
        self.dropout = cfg.dropout
        self.qkv = Linear(cfg.d_model, sum(self.head_counts) * cfg.head_dim, bias=cfg.bias)
        self.out = Linear(cfg.n_heads * cfg.head_dim, cfg.d_model, bias=cfg.bias)

    def forward(self, x: Tensor, mask: MaskSpec, rotary: tuple[Tensor, Tensor] | None,
                cache: KVCache | None = None, keep: Tensor | None = None) -> Tensor:
        """(B, T, d) → (B, T, d); with `keep` (flat positions) → (N, d) at those positions
        only, after attention, which reads every position's keys and values."""
        batch, length, _ = x.shape
        # The heads of q, k and v side by side. Split, they are views strided exactly as a
        # permute of a (3, H) layout would give, so ungrouped attention pays nothing for this.
        heads = self.qkv(x).view(batch, length, sum(self.head_counts), self.head_dim)
        q, k, v = heads.transpose(1, 2).split(self.head_counts, dim=1)  # each (B, heads, T, d)
        if rotary is not None:
            q, k = apply_rotary(q, *rotary), apply_rotary(k, *rotary)
        if cache is not None:
            k, v = cache.update(self.layer_index, k, v)
        y = attend_under(q, k, v, mask, self.dropout if self.training else 0.0)
        return self.out(gather_rows(y.transpose(1, 2).reshape(batch, length, -1), keep))
