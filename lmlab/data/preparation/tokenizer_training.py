"""Training a tokenizer on the training split: byte-level BPE, WordPiece or Unigram, with
lmlab's special tokens and then the sentinels at the first ids, as SpecialTokens.layout
expects."""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from lmlab.data.errors import DataError
from lmlab.data.tokenizer import SPECIAL_TOKENS


def sentinel_names(count: int) -> list[str]:
    return [f"<extra_id_{i}>" for i in range(count)]


def _byte_level_bpe(vocab_size: int, specials: list[str]) -> tuple[Tokenizer, object]:
    """GPT-2 style: every byte representable, so no [UNK] is ever needed."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer, trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)


def _wordpiece(vocab_size: int, specials: list[str]) -> tuple[Tokenizer, object]:
    """BERT style (cased): words split at whitespace and punctuation, `##` continuations."""
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]", continuing_subword_prefix="##"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=False, strip_accents=False)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    return tokenizer, trainers.WordPieceTrainer(
        vocab_size=vocab_size, special_tokens=specials, continuing_subword_prefix="##",
        show_progress=False)


def _unigram(vocab_size: int, specials: list[str]) -> tuple[Tokenizer, object]:
    """SentencePiece style: `▁` marks a space before a word. Line breaks and tabs count as
    spaces, so every word starts with `▁` and no piece runs across a line end."""
    tokenizer = Tokenizer(models.Unigram())
    tokenizer.normalizer = normalizers.Replace(Regex(r"[\t\n\r]"), " ")
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="always")
    tokenizer.decoder = decoders.Metaspace(prepend_scheme="always")
    return tokenizer, trainers.UnigramTrainer(
        vocab_size=vocab_size, special_tokens=specials, unk_token="[UNK]", show_progress=False)


TOKENIZER_KINDS = {"bpe": _byte_level_bpe, "wordpiece": _wordpiece, "unigram": _unigram}


def train_tokenizer(texts: Iterable[str], vocab_size: int = 8192, n_sentinels: int = 100,
                    kind: str = "bpe") -> Tokenizer:
    """A tokenizer of `kind` trained on `texts`, whose first ids are the special tokens and
    then the sentinels, as SpecialTokens.layout expects."""
    if kind not in TOKENIZER_KINDS:
        raise DataError(f"unknown tokenizer {kind!r}; use {', '.join(TOKENIZER_KINDS)} or a "
                        "tokenizer.json")
    tokenizer, trainer = TOKENIZER_KINDS[kind](
        vocab_size, [*SPECIAL_TOKENS, *sentinel_names(n_sentinels)])
    tokenizer.train_from_iterator(texts, trainer)
    return tokenizer
