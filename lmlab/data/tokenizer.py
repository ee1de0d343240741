"""What the objectives need to know about a Hugging Face `tokenizers` tokenizer."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import torch
from tokenizers import Tokenizer
from torch import Tensor

from lmlab.data.errors import DataError
from lmlab.data.special_tokens import ROLES, SpecialTokens

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

    For WordPiece and metaspace (Unigram) tokenizers the table agrees exactly with the
    tokenizer's own `word_ids`. Byte-level BPE's pre-tokenizer also starts a word at
    punctuation and after a line break without a space; those tokens carry no `Ġ`, so here
    they join the word before: a "word" is a run of text after a space, and whole-word
    masking never splits one of the tokenizer's words.
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
# Each special-token role → its token in lmlab's own tokenizers, which have every role.
LMLAB_SPECIAL_NAMES: dict[str, str] = dict(zip(ROLES, SPECIAL_TOKENS, strict=True))


def without_padding_or_truncation(tokenizer: Tokenizer) -> Tokenizer:
    """`tokenizer`, no longer padding or cutting what it encodes: lmlab frames, cuts and pads
    rows itself, while tokenizer.json files saved for inference often pad every text to a
    fixed length (sentence-transformers' to 128), which would make padding look like text."""
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def load_tokenizer(path: Path, n_sentinels: int = 0,
                   names: Mapping[str, str | None] | None = None) -> Tokenizer:
    """A saved tokenizer.json, checked for its special tokens (lmlab's, or `names` as for
    special_tokens_of) and `n_sentinels` sentinels; anything wrong is one line naming the
    file."""
    path = Path(path)
    if not path.is_file():
        raise DataError("no such tokenizer file", path)
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as error:  # tokenizers raises plain Exception for unreadable JSON
        raise DataError(f"not a Hugging Face tokenizer.json ({error})", path) from None
    without_padding_or_truncation(tokenizer)
    special = special_tokens_of(tokenizer, str(path), names)
    if len(special.sentinels) < n_sentinels:
        raise DataError(f"has {len(special.sentinels)} sentinels <extra_id_N>, fewer than the "
                        f"{n_sentinels} asked for", path)
    return tokenizer


def special_tokens_of(tokenizer: Tokenizer, source: str = "the tokenizer",
                      names: Mapping[str, str | None] | None = None) -> SpecialTokens:
    """SpecialTokens looked up by name: `names` maps each role to its token, None (or no
    entry) when the tokenizer has none; by default lmlab's names, every one required. Sentinels
    are the run of `<extra_id_0>`, `<extra_id_1>`, ... in the vocabulary. A named token the
    vocabulary lacks is a one-line error naming `source`."""
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    if names is None:
        missing = [t for t in SPECIAL_TOKENS if t not in vocab]
        if missing:
            raise DataError(f"{source} lacks the special tokens {', '.join(missing)}")
        names = LMLAB_SPECIAL_NAMES
    unknown = [role for role in names if role not in ROLES]
    if unknown:
        raise DataError(f"{source}: unknown special-token role {unknown[0]!r}; roles are "
                        f"{', '.join(ROLES)}")
    for role, token in names.items():
        if token is not None and token not in vocab:
            raise DataError(f"{source} lacks the {role} token {token!r}")
    ids = {role: vocab[token] for role, token in names.items() if token is not None}
    try:
        return SpecialTokens(tokenizer.get_vocab_size(with_added_tokens=True), **ids,
                             sentinels=_sentinel_ids(vocab))
    except ValueError as error:
        raise DataError(f"{source}: {error}") from None


def _sentinel_ids(vocab: dict[str, int]) -> tuple[int, ...]:
    sentinels, index = [], 0
    while f"<extra_id_{index}>" in vocab:
        sentinels.append(vocab[f"<extra_id_{index}>"])
        index += 1
    return tuple(sentinels)
