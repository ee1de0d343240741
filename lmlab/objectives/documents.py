"""How a packed block's documents and padding become segment ids and positions.

Convention: in a packed block every document ends with [EOS]; padding is [PAD], told apart
from text by its value alone, so it must be a token of its own. Without [EOS] (a tokenizer that
has none) a block holds no document end and reads as one document. A tokenizer without a [PAD]
of its own (GPT-2's) reads only blocks of concatenated text, which hold no padding: every
token of them is text.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lmlab.data.special_tokens import SpecialTokens
from lmlab.model.masks import positions_within_segments, segments_from_document_ends


def block_pad_id(special: SpecialTokens) -> int:
    """The [PAD] id of training blocks; a one-line ValueError when the tokenizer has none or
    shares it with another role."""
    return special.require_distinct("pad", "reading training blocks")


def blocks_pad_with(special: SpecialTokens) -> int | None:
    """[PAD] when the tokenizer has one of its own; None when it has not, and its blocks are
    then concatenated text without padding."""
    others = special.present("unk", "cls", "sep", "mask", "bos", "eos")
    return special.pad if special.pad is not None and special.pad not in others else None


def document_layout(tokens: Tensor, special: SpecialTokens) -> tuple[Tensor, Tensor]:
    """(segment_ids, positions) for a (B, T) block; positions restart in each document."""
    pad = blocks_pad_with(special)
    if special.eos is not None:
        segments = segments_from_document_ends(tokens, special.eos, pad)
    elif pad is None:
        segments = torch.ones_like(tokens)
    else:
        segments = (tokens != pad).long()
    return segments, positions_within_segments(segments)


def attention_segments(segment_ids: Tensor) -> Tensor | None:
    """None when every row is one unpadded document, which keeps attention on its fastest
    path; otherwise the segment ids themselves."""
    return None if bool((segment_ids == 1).all()) else segment_ids
