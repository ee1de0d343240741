"""Text to evaluate on, as token-id documents with the UTF-8 bytes of their text.

A prepared dataset gives a split's documents as stored (its [EOS] dropped; the bytes come
from decoding them); raw text files (.txt, .jsonl, ...) are read as `lmlab prepare` reads
them and tokenised with the run's tokenizer, as given. With `max_tokens`, documents are taken
in order until they hold that many tokens, the last one cut to fit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from lmlab.data.dataset import open_dataset
from lmlab.data.errors import DataError
from lmlab.data.text.readers import ReadStats, read_sources
from lmlab.runs import Run

ENCODE_BATCH = 256


@dataclass
class EvalText:
    source: str
    documents: list[np.ndarray]  # token ids, no [EOS]
    bytes: int  # UTF-8 bytes of the documents' text, as read (before invalid bytes' U+FFFD)
    invalid_utf8_bytes: int = 0  # bytes of raw text that were not UTF-8, each now U+FFFD

    @property
    def tokens(self) -> int:
        return sum(len(d) for d in self.documents)


def _take(items: Iterable, max_tokens: int | None, size: Callable = len,
          cut: Callable = lambda item, tokens: item[:tokens]) -> Iterator:
    """Items in order until they hold `max_tokens` tokens (all when None); the last one is
    `cut` to the tokens left for it."""
    left = max_tokens
    for item in items:
        if left is not None and left <= 0:
            return
        if left is not None and size(item) > left:
            item = cut(item, left)
        left = None if left is None else left - size(item)
        yield item


def dataset_text(path: str | Path, split: str, run: Run,
                 max_tokens: int | None = None) -> EvalText:
    dataset = open_dataset(Path(path))
    splits = {"train": dataset.train, "validation": dataset.validation}
    if split not in splits:
        raise DataError(f"{path}: no split {split!r}; choose train or validation")
    tokenizer = Tokenizer.from_str(dataset.tokenizer_json)
    _check_same_tokenizer(run, tokenizer, dataset.special, path)
    stream, eos = splits[split], dataset.special.eos

    def documents() -> Iterator[np.ndarray]:
        for start, stop in stream.document_spans().tolist():
            ids = stream.read(start, stop)
            yield ids[:-1] if len(ids) and ids[-1] == eos else ids

    chosen = [d for d in _take(documents(), max_tokens) if len(d)]
    texts = tokenizer.decode_batch([d.tolist() for d in chosen], skip_special_tokens=True)
    return EvalText(f"{path} ({split})", chosen, sum(len(t.encode("utf-8")) for t in texts))


def _check_same_tokenizer(run: Run, tokenizer: Tokenizer, special,
                          path) -> None:
    if run.tokenizer is None:
        same = special == run.special
    else:
        same = (tokenizer.get_vocab(with_added_tokens=True)
                == run.tokenizer.get_vocab(with_added_tokens=True))
    if not same:
        raise DataError(f"{path} was tokenised with another tokenizer than the run "
                        f"{run.path}; evaluate on text files or a dataset prepared "
                        "for this run")


def encode_texts(tokenizer: Tokenizer, texts: Sequence[str]) -> list[np.ndarray]:
    """As prepare encoded the training text: no post-processor's [CLS] ... [SEP]."""
    encodings = tokenizer.encode_batch(list(texts), add_special_tokens=False)
    return [np.asarray(e.ids, dtype=np.int64) for e in encodings]


def file_text(sources: Sequence[str], run: Run, text_field: str = "text",
              max_tokens: int | None = None) -> EvalText:
    """Text files read as `lmlab prepare` reads them. An invalid UTF-8 byte becomes one U+FFFD
    (three bytes) for the tokenizer, but counts as the one byte it was for bits per byte."""
    tokenizer = run.require_tokenizer()
    reading = ReadStats()

    def encoded() -> Iterator[tuple[np.ndarray, str, int]]:
        batch: list[tuple[str, int]] = []
        invalid_before = 0
        for text in read_sources(sources, text_field, stats=reading):
            invalid = reading.invalid_utf8_bytes - invalid_before  # in this text
            invalid_before = reading.invalid_utf8_bytes
            if text.strip():
                batch.append((text, invalid))
            if len(batch) == ENCODE_BATCH:
                yield from _encoded(tokenizer, batch)
                batch = []
        yield from _encoded(tokenizer, batch)

    chosen = list(_take(encoded(), max_tokens, size=lambda item: len(item[0]),
                        cut=lambda item, tokens: _cut(tokenizer, item, tokens)))
    invalid = sum(count for _, _, count in chosen)
    return EvalText(" ".join(map(str, sources)), [ids for ids, _, _ in chosen],
                    sum(len(text.encode("utf-8")) for _, text, _ in chosen) - 2 * invalid,
                    invalid)


def _cut(tokenizer: Tokenizer, item: tuple[np.ndarray, str, int],
         tokens: int) -> tuple[np.ndarray, str, int]:
    """A text's first `tokens` tokens, with the text they cover (as far as the last one's
    end) and the invalid bytes in it: each is one U+FFFD there."""
    ids, text, invalid = item
    end = tokenizer.encode(text, add_special_tokens=False).offsets[tokens - 1][1]
    return ids[:tokens], text[:end], min(invalid, text[:end].count("\ufffd"))


def _encoded(tokenizer: Tokenizer, batch: list[tuple[str, int]]
             ) -> Iterator[tuple[np.ndarray, str, int]]:
    texts = [text for text, _ in batch]
    for ids, (text, invalid) in zip(encode_texts(tokenizer, texts), batch, strict=True):
        yield ids, text, invalid
