"""The one framing of rows "as the run was trained": the tokens around a text, for reading
(inference, evaluation, the server) and for tasks; texts → token rows for fine-tuning (`[CLS] A
[SEP]` or `[CLS] A [SEP] B [SEP]` with token types), and words → pieces with the word each
piece belongs to (NER).

Training reads packed documents that each end with [EOS]; sentence-pair objectives (NSP) and
fine-tuning read `[CLS] A [SEP] B [SEP]` rows. A tokenizer without [CLS] or [SEP] (GPT-2's)
frames rows with what it has: no leading token without [CLS]; without [SEP], its [EOS] closes
each text (`A [EOS] B [EOS]`, as a causal model read documents), and without either nothing
does; a document without [EOS] (BERT's) is its ids alone.

Words are encoded as one text joined by spaces, as the tokenizer saw text in pre-training, and
each piece is given the word its characters fall in; encoding words one by one would lose a
byte-level tokenizer's leading-space marker and read every word as a sentence start.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tokenizers import Tokenizer, pre_tokenizers

from lmlab.data.special_tokens import SpecialTokens
from lmlab.objectives.traits import Framing

# The most tokens a pair's row spends on [CLS] and [SEP]s.
PAIR_OVERHEAD = 3


@dataclass(frozen=True)
class Words:
    """A text split into words, with each word's character span in the text."""

    words: tuple[str, ...]
    spans: tuple[tuple[int, int], ...]

    @classmethod
    def of_text(cls, text: str) -> Words:
        """Split raw text as CoNLL corpora are split: at whitespace and punctuation."""
        found = pre_tokenizers.BertPreTokenizer().pre_tokenize_str(text)
        return cls(tuple(word for word, _ in found), tuple(span for _, span in found))

    @classmethod
    def joined(cls, words: Sequence[str]) -> Words:
        spans, start = [], 0
        for word in words:
            spans.append((start, start + len(word)))
            start += len(word) + 1
        return cls(tuple(words), tuple(spans))

    def text(self) -> str:
        """A text in which every word lies at its span (gaps filled with spaces)."""
        chars = [" "] * (self.spans[-1][1] if self.spans else 0)
        for word, (start, end) in zip(self.words, self.spans, strict=True):
            chars[start:end] = word
        return "".join(chars)


def closing_ids(special: SpecialTokens) -> list[int]:
    """The token closing each text of a row, and so every row's last: [SEP], else [EOS], else
    none ([])."""
    return special.present("sep") or special.present("eos")


def frame_tokens(special: SpecialTokens, framing: Framing) -> tuple[list[int], list[int]]:
    """The tokens before and after one text as training framed it, those the tokenizer has:
    `[CLS] text [SEP]` for sentence-pair rows (and fine-tuning's), `text [EOS]` for packed
    documents."""
    if framing == "pair":
        return special.present("cls"), closing_ids(special)
    return [], special.present("eos")


def padding_apart(special: SpecialTokens) -> int:
    """A padding id that no row ends with, by which a model that takes a row's last token to
    be its last one that is not padding (Hugging Face's GPT-2 and Llama sequence classes)
    finds the token a row is pooled at: the tokenizer's padding token unless it is also the
    token closing every row (an end-of-text used as padding), else another of its special
    tokens, which already stand apart from text, so that padding with one changes no text's
    tokens (an ordinary token would: declared special, it is split out of the words holding
    it). A one-line ValueError saying why when there is none."""
    closing = closing_ids(special)
    if special.pad is not None and special.pad not in closing:
        return special.pad
    if not closing:
        raise ValueError("the tokenizer has no padding token, and no [SEP] or [EOS] closes its "
                         "rows (a row may end with any token)")
    role = "sep" if special.sep is not None else "eos"
    other = next((token for token in special.all_ids if token not in closing), None)
    if other is None and special.pad is not None:
        raise ValueError(f"the tokenizer's padding token is also its {role} token, which "
                         "closes every row, and it has no other special token to pad with")
    if other is None:
        raise ValueError(f"the tokenizer has no padding token, and no special token besides "
                         f"its {role} token, which closes every row")
    return other


@dataclass
class Encoder:
    tokenizer: Tokenizer
    special: SpecialTokens
    max_len: int
    token_types: bool  # whether the model has token-type embeddings

    @property
    def leader(self) -> list[int]:
        """The token before the first text: [CLS], or none."""
        return frame_tokens(self.special, "pair")[0]

    @property
    def ender(self) -> list[int]:
        """The token closing each text: [SEP], else [EOS], else none."""
        return frame_tokens(self.special, "pair")[1]

    def ids(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def with_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        encoding = self.tokenizer.encode(text, add_special_tokens=False)
        return encoding.ids, encoding.offsets

    def pair(self, text: str, text_pair: str | None = None) -> tuple[list[int], list[int]]:
        """(ids, token types) of `[CLS] A [SEP] (B [SEP])`, the longer text cut first when the
        row would exceed max_len, as BERT's fine-tuning truncates pairs."""
        leader, ender = self.leader, self.ender
        first = self.ids(text)
        if text_pair is None:
            first = first[: self.max_len - len(leader) - len(ender)]
            ids = [*leader, *first, *ender]
            return ids, [0] * len(ids)
        second = self.ids(text_pair)
        while len(first) + len(second) > self.max_len - len(leader) - 2 * len(ender):
            if len(first) >= len(second):
                first.pop()
            else:
                second.pop()
        a_part, b_part = [*leader, *first, *ender], [*second, *ender]
        return [*a_part, *b_part], [0] * len(a_part) + [1] * len(b_part)

    def words(self, words: Words) -> tuple[list[int], list[int | None]]:
        """(ids of `[CLS] pieces [SEP]`, the word index of each id, None for [CLS] and
        [SEP]); pieces past max_len are cut, and their words left unread."""
        leader, ender = self.leader, self.ender
        word_of_char = {}
        for index, (start, end) in enumerate(words.spans):
            word_of_char.update(dict.fromkeys(range(start, end), index))
        ids, offsets = self.with_offsets(words.text())
        word_ids = [_first_word(start, end, word_of_char) for start, end in offsets]
        kept = self.max_len - len(leader) - len(ender)
        return ([*leader, *ids[:kept], *ender],
                [None] * len(leader) + word_ids[:kept] + [None] * len(ender))


def _first_word(start: int, end: int, word_of_char: dict[int, int]) -> int | None:
    """The word of a piece: that of its first character inside a word (a byte-level piece
    such as "Ġfox" starts at the space before the word)."""
    return next((word_of_char[c] for c in range(start, end) if c in word_of_char), None)


def first_pieces(word_ids: Sequence[int | None]) -> list[int]:
    """Positions of each word's first piece, in word order."""
    seen, positions = set(), []
    for position, word in enumerate(word_ids):
        if word is not None and word not in seen:
            seen.add(word)
            positions.append(position)
    return positions
