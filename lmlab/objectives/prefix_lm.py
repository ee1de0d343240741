"""Prefix language modelling (Raffel et al. 2020; Wang et al. 2022): a bidirectional prefix,
then causal generation of the rest, with the loss on the generated part."""

from __future__ import annotations

import torch
from torch import Tensor

from lmlab.data.special_tokens import SpecialTokens
from lmlab.model.masks import MaskSpec
from lmlab.model.selectors import Positions
from lmlab.objectives.base import Objective
from lmlab.objectives.batch import Batch
from lmlab.objectives.documents import attention_segments, block_pad_id, document_layout
from lmlab.objectives.losses import IGNORE_INDEX, next_token_targets
from lmlab.objectives.traits import Traits


class PrefixLM(Objective):
    """Before / after with a prefix of 3 (`-` = ignored target):

        tokens   the cat sat on  the mat
        inputs   the cat sat on  the mat     attention: first 3 bidirectional, then causal
        targets   -   -  on  the mat  -      (loss on the suffix only)

    The split is drawn uniformly per row from [1, length - 1], or fixed by `prefix_len`.
    A loss on prefix tokens is deliberately not offered: a prefix position sees the token it
    would predict, so such a loss teaches copying, not language.
    """

    name = "prefix"
    predicts_at_targets = True
    title = "prefix LM (prefix)"
    traits = Traits(attention="prefix", heads=("lm",), scoring="prefix", generation="prefix",
                    needs=("pad",))

    def __init__(self, special: SpecialTokens, prefix_len: int | None = None) -> None:
        if prefix_len is not None and prefix_len < 1:
            raise ValueError(f"prefix_len must be at least 1, got {prefix_len}")
        special.require_all(self.traits.needs, self.title)
        self.special = special
        self.prefix_len = prefix_len

    def split_points(self, lengths: Tensor, generator: torch.Generator) -> Tensor:
        if self.prefix_len is not None:
            return torch.minimum(torch.full_like(lengths, self.prefix_len),
                                 (lengths - 1).clamp(min=1))
        draws = torch.rand(lengths.shape, generator=generator, dtype=torch.float64)
        return 1 + (draws * (lengths - 1).clamp(min=1)).long()

    def predicted_fraction(self, rows: int, seq_len: int) -> float:
        """Targets start at the split: seq_len − split of seq_len positions, where a drawn
        split (uniform over 1 … seq_len − 1) averages seq_len / 2."""
        split = (seq_len / 2 if self.prefix_len is None
                 else min(self.prefix_len, max(seq_len - 1, 1)))
        return (seq_len - split) / seq_len

    def make_batch(self, tokens: Tensor, generator: torch.Generator, step: int = 0) -> Batch:
        segments, positions = document_layout(tokens, self.special)
        pad = block_pad_id(self.special)
        prefix_len = self.split_points((tokens != pad).sum(1), generator)
        targets = next_token_targets(tokens, segments)
        index = torch.arange(tokens.shape[1])
        targets = targets.masked_fill(index[None, :] < prefix_len[:, None] - 1, IGNORE_INDEX)
        return Batch(
            input_ids=tokens, mask=MaskSpec("prefix", prefix_len=prefix_len,
                                             segment_ids=attention_segments(segments)),
            positions=positions, targets=targets,
            predict_at={"lm": Positions.where(targets != IGNORE_INDEX)},
        )
