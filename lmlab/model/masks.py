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

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

Kind = Literal["bidirectional", "causal", "prefix"]


@dataclass(frozen=True)
class MaskSpec:
    kind: Kind
    prefix_len: Tensor | None = None  # (B,) int, only for kind="prefix"
    segment_ids: Tensor | None = None  # (B, T) int, 0 = padding, 1.. = documents

    def __post_init__(self) -> None:
        if self.kind not in ("bidirectional", "causal", "prefix"):
            raise ValueError(f"unknown attention kind {self.kind!r}")
        if (self.kind == "prefix") != (self.prefix_len is not None):
            raise ValueError("prefix_len is required for, and only for, kind='prefix'")

    def to(self, device: torch.device | str) -> MaskSpec:
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
        no_segments = self.segment_ids is None
        if no_segments and self.kind == "bidirectional":
            return None, False
        if no_segments and self.kind == "causal":
            if query_len == key_len:
                return None, True  # the fused kernel's own causal path
            if query_len == 1:
                return None, False  # one new token may see the whole cache
        return self.allowed(query_len, key_len)[:, None], False

    def allowed(self, query_len: int, key_len: int) -> Tensor:
        """Boolean (B or 1, Tq, Tk): True where query i may attend to key j."""
        device = self.segment_ids.device if self.segment_ids is not None else None
        if self.prefix_len is not None:
            device = self.prefix_len.device
        key_pos = torch.arange(key_len, device=device)
        query_pos = key_pos[key_len - query_len:]
        if self.kind == "bidirectional":
            allowed = torch.ones(1, query_len, key_len, dtype=torch.bool, device=device)
        else:
            allowed = (key_pos[None, :] <= query_pos[:, None])[None]
            if self.kind == "prefix":
                in_prefix = key_pos[None, :] < self.prefix_len[:, None]  # (B, Tk)
                allowed = allowed | in_prefix[:, None, :]
        if self.segment_ids is not None:
            keys = self.segment_ids
            queries = keys[:, key_len - query_len:]
            allowed = allowed & (queries[:, :, None] == keys[:, None, :])
        return allowed


def segments_from_document_ends(tokens: Tensor, end_id: int, pad_id: int) -> Tensor:
    """Segment ids for a packed block whose documents each end with `end_id`.

    >>> segments_from_document_ends(torch.tensor([[5, 6, 2, 7, 2, 0]]), end_id=2, pad_id=0)
    tensor([[1, 1, 1, 2, 2, 0]])
    """
    is_end = (tokens == end_id).long()
    segments = 1 + torch.cumsum(is_end, dim=1) - is_end  # an end token closes its own document
    return segments.masked_fill(tokens == pad_id, 0)


def positions_within_segments(segment_ids: Tensor) -> Tensor:
    """Position of each token inside its own document (restarting at 0 for each)."""
    batch, length = segment_ids.shape
    index = torch.arange(length, device=segment_ids.device).expand(batch, length)
    starts = torch.ones_like(segment_ids, dtype=torch.bool)
    starts[:, 1:] = segment_ids[:, 1:] != segment_ids[:, :-1]
    start_index = torch.where(starts, index, torch.zeros_like(index))
    return index - torch.cummax(start_index, dim=1).values
