"""MaskSpec: the attention policy, described once and turned into what SDPA needs.

A policy is a kind (who may look at whom along the sequence) intersected with segment
isolation (packed documents and padding never see each other):

    bidirectional: every key          causal: keys j <= i
    prefix:        keys j <= i, or j < prefix_len of that row

Invariant: the diagonal (a token attending to itself) is allowed under every kind and every
segmentation, so no query row is ever fully masked — fully masked rows make SDPA return NaN.
Padding is segment 0; a padding query sees only padding keys, a real query never sees them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import torch
from torch import Tensor

Kind = Literal["bidirectional", "causal", "prefix"]


@dataclass(frozen=True)
class MaskSpec:
    kind: Kind
    prefix_len: Tensor | None = None  # (B,) int, only for kind="prefix"
    segment_ids: Tensor | None = None  # (B, T) int, 0 = padding, 1.. = documents
    # FlexAttention's BlockMask of the whole sequence, built before a compiled step
    # (`with_block_mask`), outside its graph
    built: Any = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.kind not in ("bidirectional", "causal", "prefix"):
            raise ValueError(f"unknown attention kind {self.kind!r}")
        if (self.kind == "prefix") != (self.prefix_len is not None):
            raise ValueError("prefix_len is required for, and only for, kind='prefix'")

    def to(self, device: torch.device | str,
           move: Callable[[Tensor | None], Tensor | None] | None = None) -> MaskSpec:
        """The spec on `device`; `move` copies each tensor (a batch's own way, pinned)."""
        if move is None:
            move = lambda t: None if t is None else t.to(device)  # noqa: E731
        return MaskSpec(self.kind, move(self.prefix_len), move(self.segment_ids))

    def rows(self, start: int, stop: int) -> MaskSpec:
        cut = lambda t: None if t is None else t[start:stop]  # noqa: E731
        return MaskSpec(self.kind, cut(self.prefix_len), cut(self.segment_ids))

    def sdpa_arguments(self, query_len: int, key_len: int) -> tuple[Tensor | None, bool]:
        """(attn_mask, is_causal) for F.scaled_dot_product_attention.

        Queries are the last `query_len` of `key_len` positions (a KV cache holds the rest).
        With `segment_ids` given they must cover all `key_len` positions.
        """
        if not self.needs_mask(query_len, key_len):
            # the fused kernel's own causal path, or no mask: every key, or one new token
            # that may see the whole cache
            causal = self.kind == "causal" and query_len == key_len
            return None, causal
        return self.allowed(query_len, key_len)[:, None], False

    def needs_mask(self, query_len: int, key_len: int) -> bool:
        """Whether attention needs the policy spelled out (a dense mask or a block mask)
        rather than SDPA's `is_causal` or no mask at all."""
        if self.segment_ids is not None or self.kind == "prefix":
            return True
        return self.kind == "causal" and query_len not in (key_len, 1)

    def allowed(self, query_len: int, key_len: int) -> Tensor:
        """Boolean (B or 1, Tq, Tk): True where query i may attend to key j — `may_attend`
        evaluated at every (row, query, key)."""
        device, rows = self._device_and_rows()
        b = torch.arange(rows, device=device)[:, None, None]
        q = torch.arange(query_len, device=device)[None, :, None]
        k = torch.arange(key_len, device=device)[None, None, :]
        allowed = self.may_attend(key_len - query_len)(b, 0, q, k)
        return allowed.expand(rows, query_len, key_len)

    def may_attend(self, query_offset: int) -> Callable[..., Tensor]:
        """The policy as one rule, `(row, head, query, key) → may the query attend to the
        key`, on index tensors that broadcast: FlexAttention's mask_mod, and what `allowed`
        evaluates densely. Query q sits at position q + query_offset (a KV cache holds the
        earlier ones)."""
        kind, prefix_len, segments = self.kind, self.prefix_len, self.segment_ids

        def mask_mod(b: Tensor, h, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
            query_pos = q_idx + query_offset
            if kind == "bidirectional":
                allowed = kv_idx >= 0
            else:
                allowed = kv_idx <= query_pos
                if kind == "prefix":
                    allowed = allowed | (kv_idx < prefix_len[b])
            if segments is not None:
                allowed = allowed & (segments[b, query_pos] == segments[b, kv_idx])
            return allowed

        return mask_mod

    def with_block_mask(self, length: int) -> MaskSpec:
        """The spec with its (length, length) BlockMask built now: a compiled model then
        finds it made, once per batch, outside its graph, and every layer shares it."""
        return replace(self, built=self.block_mask(length, length))

    def block_mask(self, query_len: int, key_len: int):
        """FlexAttention's BlockMask of the policy, built once per MaskSpec and shape: every
        layer of a forward pass shares it, and blocks no query may see are skipped."""
        from torch.nn.attention.flex_attention import create_block_mask

        if self.built is not None and tuple(self.built.seq_lengths) == (query_len, key_len):
            return self.built

        built = self.__dict__.setdefault("_block_masks", {})  # frozen: a cache beside fields
        if (query_len, key_len) not in built:
            device, rows = self._device_and_rows()
            built[query_len, key_len] = create_block_mask(
                self.may_attend(key_len - query_len), rows, None, query_len, key_len,
                device=device if device is not None else "cpu")
        return built[query_len, key_len]

    def _device_and_rows(self) -> tuple[torch.device | None, int]:
        for per_row in (self.segment_ids, self.prefix_len):
            if per_row is not None:
                return per_row.device, per_row.shape[0]
        return None, 1


def segments_from_document_ends(tokens: Tensor, end_id: int, pad_id: int | None) -> Tensor:
    """Segment ids for a packed block whose documents each end with `end_id` (padded with
    `pad_id`, or, when None, never padded).

    >>> segments_from_document_ends(torch.tensor([[5, 6, 2, 7, 2, 0]]), end_id=2, pad_id=0)
    tensor([[1, 1, 1, 2, 2, 0]])
    """
    is_end = (tokens == end_id).long()
    segments = 1 + torch.cumsum(is_end, dim=1) - is_end  # an end token closes its own document
    return segments if pad_id is None else segments.masked_fill(tokens == pad_id, 0)


def positions_within_segments(segment_ids: Tensor) -> Tensor:
    """Position of each token inside its own document (restarting at 0 for each)."""
    batch, length = segment_ids.shape
    index = torch.arange(length, device=segment_ids.device).expand(batch, length)
    starts = torch.ones_like(segment_ids, dtype=torch.bool)
    starts[:, 1:] = segment_ids[:, 1:] != segment_ids[:, :-1]
    start_index = torch.where(starts, index, torch.zeros_like(index))
    return index - torch.cummax(start_index, dim=1).values
