"""How a packed block's documents and padding become segment ids and positions.

Convention: in a packed block every document ends with [EOS]; padding is [PAD].
"""

from __future__ import annotations

from torch import Tensor

from lmlab.model.masks import positions_within_segments, segments_from_document_ends
from lmlab.objectives.base import SpecialTokens


def document_layout(tokens: Tensor, special: SpecialTokens,
                    isolate_documents: bool = True) -> tuple[Tensor, Tensor]:
    """(segment_ids, positions) for a (B, T) block; positions restart in each document."""
    if isolate_documents:
        segments = segments_from_document_ends(tokens, special.eos, special.pad)
    else:
        segments = (tokens != special.pad).long()
    return segments, positions_within_segments(segments)


def attention_segments(segment_ids: Tensor) -> Tensor | None:
    """None when every row is one unpadded document, which keeps attention on its fastest
    path; otherwise the segment ids themselves."""
    return None if bool((segment_ids == 1).all()) else segment_ids
