"""How a packed block's documents and padding become segment ids and positions.

Convention: in a packed block every document ends with [EOS]; padding is [PAD].
"""

from __future__ import annotations

from torch import Tensor

from lmlab.model.masks import positions_within_segments, segments_from_document_ends
from lmlab.objectives.base import SpecialTokens


def document_layout(tokens: Tensor, special: SpecialTokens,
                    isolate_documents: bool = True) -> tuple[Tensor | None, Tensor]:
    """(segment_ids or None, positions) for a (B, T) block.

    Segment ids are None when the block is one unpadded document per row, which keeps
    attention on its fastest path. Positions restart at 0 in each isolated document.
    """
    if isolate_documents:
        segments = segments_from_document_ends(tokens, special.eos, special.pad)
    else:
        segments = (tokens != special.pad).long()
    positions = positions_within_segments(segments)
    if bool((segments == 1).all()):
        return None, positions
    return segments, positions
