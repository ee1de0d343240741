"""Causal language modelling: predict every next token (Radford et al. 2018)."""

from __future__ import annotations

import torch
from torch import Tensor

from lmlab.data.special_tokens import SpecialTokens
from lmlab.model.masks import MaskSpec
from lmlab.objectives.base import Objective
from lmlab.objectives.batch import Batch
from lmlab.objectives.documents import attention_segments, document_layout
from lmlab.objectives.losses import next_token_targets
from lmlab.objectives.traits import Traits


class CausalLM(Objective):
    """Before / after (`|` = [EOS] closing a packed document, `-` = ignored target):

        tokens   the cat sat |   a  dog
        inputs   the cat sat |   a  dog        attention: causal, within each document
        targets  cat sat  |  -  dog  -         (no target crosses into the next document)
    """

    name = "clm"
    title = "causal LM (clm)"
    # Nothing special is needed to build it, so that a model whose tokenizer has no [PAD]
    # (GPT-2's) loads and generates; padded training blocks require [PAD] when made.
    traits = Traits(attention="causal", heads=("lm",), scoring="causal", generation="causal")

    def __init__(self, special: SpecialTokens) -> None:
        special.require_all(self.traits.needs, self.title)
        self.special = special

    def predicted_fraction(self, rows: int, seq_len: int) -> float:
        """Every position but a block's last has a next token to predict; the one lost at each
        document end inside a block depends on the data and is not counted."""
        return (seq_len - 1) / seq_len

    def make_batch(self, tokens: Tensor, generator: torch.Generator, step: int = 0) -> Batch:
        segments, positions = document_layout(tokens, self.special)
        return Batch(
            input_ids=tokens, mask=MaskSpec("causal", segment_ids=attention_segments(segments)),
            positions=positions, targets=next_token_targets(tokens, segments),
            predict_at={"lm": None},
        )
