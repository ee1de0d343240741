"""What an objective declares about itself, so that nothing outside `objectives/` has to switch
on its name: how it attends, which data layout and heads it needs, how a text is framed and
scored at inference, and what the trained model can then do."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from lmlab.model.masks import Kind

# How a text is read at inference, as training laid it out: "document" = its ids then [EOS]
# (a packed document); "pair" = [CLS] ids [SEP] (BERT's sentence-pair rows).
Framing = Literal["document", "pair"]
# The data layout a block must have: "any" packing, or "sentences" (whole sentences per row).
PackingNeed = Literal["any", "sentences"]
# How a model trained this way continues text: after a causal read, after a bidirectional
# prefix, or by T5-style infilling of sentinel gaps; None = it cannot generate.
GenerationMode = Literal["causal", "prefix", "infill"] | None
# The scoring rule of lmlab.eval.rules that reads a text as this objective trained the model.
Scoring = Literal["causal", "prefix", "pseudo", "pseudo-next", "pseudo-span"]


@dataclass(frozen=True)
class Traits:
    attention: Kind  # the attention policy of its training rows
    heads: tuple[str, ...]  # the heads it trains
    packing: PackingNeed = "any"
    framing: Framing = "document"
    scoring: Scoring = "causal"
    generation: GenerationMode = None
    fill_mask: tuple[str, int] | None = None  # (head, shift): where a [MASK] is predicted
    # The special tokens its batches are made with: roles of SpecialTokens, or SENTINELS for
    # at least one <extra_id_N>. Building it with a tokenizer that lacks one fails.
    needs: tuple[str, ...] = ()
