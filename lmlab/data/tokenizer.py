"""What the objectives need to know about a Hugging Face `tokenizers` tokenizer."""

from __future__ import annotations

import json

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from torch import Tensor

from lmlab.data.errors import DataError
from lmlab.objectives.base import SpecialTokens

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


SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[BOS]", "[EOS]")


def sentinel_names(count: int) -> list[str]:
    return [f"<extra_id_{i}>" for i in range(count)]


def train_tokenizer(texts, vocab_size: int = 8192, n_sentinels: int = 100) -> Tokenizer:
    """A byte-level BPE tokenizer (GPT-2 style: every byte representable, no [UNK] needed)
    whose first ids are the special tokens, then the sentinels, as SpecialTokens.layout."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=[*SPECIAL_TOKENS, *sentinel_names(n_sentinels)],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(texts, trainer)
    return tokenizer


def special_tokens_of(tokenizer: Tokenizer, source: str = "the tokenizer"):
    """SpecialTokens looked up by name; a missing one is a one-line error naming `source`."""
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    missing = [t for t in SPECIAL_TOKENS if t not in vocab]
    if missing:
        raise DataError(f"{source} lacks the special tokens {', '.join(missing)}")
    sentinels, index = [], 0
    while f"<extra_id_{index}>" in vocab:
        sentinels.append(vocab[f"<extra_id_{index}>"])
        index += 1
    ids = [vocab[t] for t in SPECIAL_TOKENS]
    return SpecialTokens(tokenizer.get_vocab_size(with_added_tokens=True), *ids,
                         sentinels=tuple(sentinels))
