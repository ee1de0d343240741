"""softmax(q·kᵀ/√d)·v under an attention policy, by the fastest route for the device and the
work: PyTorch's fused kernel (SDPA) with `is_causal`, no mask or a dense one; plain products
for short sequences in CPU training; on a GPU, FlexAttention's block masks for policies that
need a mask (packed documents, prefix LM, span corruption). tests/test_attention_policy.py,
test_flex_attention.py and test_gqa.py hold every route equal to SDPA with the dense mask."""

from __future__ import annotations

import functools
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor

# Training on CPU, for short sequences a plain product → fp32 softmax → product beats PyTorch's
# fused attention kernel, forward + backward (2 cores, 32 × 4 heads × 128 positions × 64 a
# layer): in bf16 17 ms against 40 ms, in fp32 11-12 ms against 15-17 ms. Beyond this many keys
# the fused kernel's memory behaviour wins: in fp32 they are level at 256 and the fused kernel
# is 1.4x faster at 512; in bf16 level at 512 and 3x faster at 1024. Without gradients
# (evaluation, decoding) the fused kernel is the faster one at every length measured.
PLAIN_MAX_KEYS = {torch.bfloat16: 256, torch.float32: 128}
# Devices where a masked policy runs through compiled FlexAttention: its kernels skip the
# blocks no query may see. On CPU it has no backward pass, so there SDPA takes a dense mask.
FLEX_DEVICES = frozenset({"cuda"})


class Policy(Protocol):
    """Who may attend to whom, in the form each route takes (lmlab.model.masks.MaskSpec).
    Queries are the last `query_len` of `key_len` positions (a KV cache holds the rest)."""

    def needs_mask(self, query_len: int, key_len: int) -> bool:
        """Whether the policy must be spelled out, not given by `is_causal` or no mask."""

    def sdpa_arguments(self, query_len: int, key_len: int) -> tuple[Tensor | None, bool]:
        """(attn_mask, is_causal) for SDPA."""

    def block_mask(self, query_len: int, key_len: int):
        """FlexAttention's BlockMask."""


def attend(q: Tensor, k: Tensor, v: Tensor, mask: Policy, dropout_p: float) -> Tensor:
    """softmax(q·kᵀ/√d)·v over (B, H, T, head_dim), each query over the keys `mask` allows.
    Keys and values may have fewer heads than queries (grouped-query attention): each serves
    a group of consecutive query heads. FlexAttention takes a policy that needs a mask on
    FLEX_DEVICES, without dropout (which it lacks); plain products take short sequences in CPU
    training; SDPA the rest."""
    query_len, key_len = q.shape[2], k.shape[2]
    if mask.needs_mask(query_len, key_len) and q.device.type in FLEX_DEVICES and not dropout_p:
        return flex_attend(q, k, v, mask.block_mask(query_len, key_len))
    attn_mask, is_causal = mask.sdpa_arguments(query_len, key_len)
    if (q.device.type == "cpu" and q.requires_grad and torch.is_grad_enabled()
            and key_len <= PLAIN_MAX_KEYS.get(q.dtype, 0)):
        return plain_attention(q, k, v, attn_mask, is_causal, dropout_p)
    return sdpa(q, k, v, attn_mask, is_causal, dropout_p)


def sdpa(q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None, is_causal: bool,
         dropout_p: float) -> Tensor:
    """PyTorch's fused attention (F.scaled_dot_product_attention), grouped query heads
    included: the reference every other route is held equal to."""
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal,
                                          dropout_p=dropout_p, enable_gqa=_grouped(q, k))


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


def _grouped(q: Tensor, k: Tensor) -> bool:
    return q.shape[1] != k.shape[1]


def _repeat_heads(kv: Tensor, group_size: int) -> Tensor:
    """(B, kv_heads, S, d) → (B, kv_heads·group_size, S, d), each head repeated for its group."""
    return kv.repeat_interleave(group_size, dim=1)  # (B, kvh·group_size, S, hs)


def plain_attention(q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None,
                    is_causal: bool, dropout_p: float) -> Tensor:
    """SDPA's result by two batched products around an fp32 softmax."""
    if _grouped(q, k):
        group_size = q.shape[1] // k.shape[1]
        k, v = _repeat_heads(k, group_size), _repeat_heads(v, group_size)
    batch, heads, query_len, width = q.shape
    key_len = k.shape[2]
    q, k, v = (t.reshape(batch * heads, -1, width) for t in (q, k, v))  # (B·nh, T, hs)
    if is_causal:  # the mask added inside the product: no separate pass forward or backward
        bias = (causal_bias if torch.compiler.is_compiling() else _kept_causal_bias)(
            query_len, key_len, q.dtype, q.device)  # a compiled graph holds its own
        scores = torch.baddbmm(bias, q, k.transpose(1, 2), alpha=width**-0.5)  # (B·nh, T, S)
    else:
        scores = torch.bmm(q * width**-0.5, k.transpose(1, 2))  # (B·nh, T, S)
    if attn_mask is not None:  # broadcast over the 4-d view of the scores, copied nowhere
        scores = scores.view(batch, heads, query_len, key_len).masked_fill(  # (B, nh, T, S)
            ~attn_mask, float("-inf")).view(batch * heads, query_len, key_len)  # (B·nh, T, S)
    weights = torch.softmax(scores, -1, dtype=torch.float32)  # accumulated in fp32
    if dropout_p:
        weights = F.dropout(weights, dropout_p)
    return torch.bmm(weights.to(v.dtype), v).view(batch, heads, query_len, width)  # (B, nh, T, hs)


def causal_bias(query_len: int, key_len: int, dtype: torch.dtype, device: torch.device) -> Tensor:
    """0 where a query may see a key, -inf after it; queries are the last of the keys'
    positions, as everywhere in lmlab."""
    later = torch.ones(query_len, key_len, dtype=torch.bool, device=device).triu(
        key_len - query_len + 1)
    return torch.zeros(query_len, key_len, dtype=dtype, device=device).masked_fill(
        later, float("-inf"))


_kept_causal_bias = functools.lru_cache(maxsize=16)(causal_bias)
