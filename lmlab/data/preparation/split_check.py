"""Both splits must receive documents. Documents go to a split whole, by a hash of their text
(cleaning.split_of), so a corpus of a few long documents (a .txt file is one document unless
blank lines separate them) can leave the validation split empty. Counted as the cleaned
documents stream by, so that such a corpus fails as soon as it has been read, not after a
tokenizer has been trained on it and it has been encoded."""

from __future__ import annotations

from collections.abc import Iterator

from lmlab.data.errors import DataError
from lmlab.data.preparation.cleaning import split_of


class _Tally:
    def __init__(self, streams: int) -> None:
        self.unfinished = streams
        self.documents = {"train": 0, "validation": 0}
        self.longest_bytes = 0


def checked_splits(streams: list[Iterator[str]], validation_fraction: float,
                   blank_line_documents: bool) -> list[Iterator[str]]:
    """`streams` as they are, raising DataError when the last of them ends with a split that
    no document fell in."""
    tally = _Tally(len(streams))
    return [_counted(stream, tally, validation_fraction, blank_line_documents)
            for stream in streams]


def _counted(stream: Iterator[str], tally: _Tally, validation_fraction: float,
             blank_line_documents: bool) -> Iterator[str]:
    for text in stream:
        tally.documents[split_of(text, validation_fraction)] += 1
        tally.longest_bytes = max(tally.longest_bytes, len(text.encode("utf-8")))
        yield text
    tally.unfinished -= 1
    empty = [split for split, count in tally.documents.items() if count == 0]
    if tally.unfinished == 0 and empty:
        raise DataError(_advice(empty[0], tally, validation_fraction, blank_line_documents))


def _advice(split: str, tally: _Tally, validation_fraction: float,
            blank_line_documents: bool) -> str:
    total = sum(tally.documents.values())
    ways = ([] if blank_line_documents
            else ["give --blank-line-documents if blank lines separate its documents"])
    ways += ["split long documents into several (blank lines between them in a .txt file, "
             "or one JSON line each)", "change --validation-fraction"]
    return (f"no document fell in the {split} split: documents are split whole, and the "
            f"corpus came to {total:,} document{'s' if total != 1 else ''} after cleaning (the "
            f"longest {_size(tally.longest_bytes)}) at validation fraction {validation_fraction}; "
            f"{'; or '.join(ways)}")


def _size(count: int) -> str:
    return f"{count / 1e6:.1f} MB" if count >= 100_000 else f"{count:,} bytes"
