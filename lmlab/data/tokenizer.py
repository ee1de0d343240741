"""What the objectives need to know about a Hugging Face `tokenizers` tokenizer."""

from __future__ import annotations

import json

import torch
from tokenizers import Tokenizer
from torch import Tensor

# Markers that byte-level and metaspace pre-tokenizers put on a word's first piece.
WORD_START_MARKERS = {"ByteLevel": "Ġ", "Metaspace": "▁"}


def _pre_tokenizer_types(spec: dict | None) -> list[str]:
    if not spec:
        return []
    if spec["type"] == "Sequence":
        return [t for part in spec["pretokenizers"] for t in _pre_tokenizer_types(part)]
    return [spec["type"]]


def word_start_table(tokenizer: Tokenizer) -> Tensor:
    """Boolean (vocab_size,): True for vocabulary entries that begin a word.

    WordPiece marks continuations (`##`); byte-level BPE and metaspace tokenizers mark word
    starts (`Ġ`, `▁`). Entries of unmarked tokenizers all count as starts, which makes
    whole-word masking fall back to token masking rather than ever splitting a word.
    """
    spec = json.loads(tokenizer.to_str())
    model = spec["model"]
    table = torch.ones(tokenizer.get_vocab_size(with_added_tokens=True), dtype=torch.bool)
    continuation_prefix = model.get("continuing_subword_prefix")
    markers = [WORD_START_MARKERS[t] for t in _pre_tokenizer_types(spec.get("pre_tokenizer"))
               if t in WORD_START_MARKERS]
    for token, index in tokenizer.get_vocab(with_added_tokens=False).items():
        if continuation_prefix:
            table[index] = not token.startswith(continuation_prefix)
        elif markers:
            table[index] = token.startswith(tuple(markers))
    return table
