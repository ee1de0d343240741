"""Token streams on disk: one flat array of ids per split, memory-mapped on read.

    SPLIT.tokens.bin     ids as uint16 (vocabularies up to 65,536) or uint32, every document
                         followed by [EOS]
    SPLIT.documents.npy  int64 (documents, 2): each document's [start, stop) in the stream,
                         the [EOS] included
    SPLIT.sentences.npy  int64 (sentences, 2): each sentence's [start, stop), in stream order;
                         a document's sentences tile it up to, not including, its [EOS]

Everything is appended as it is encoded (offsets go to a raw side file and become .npy when
the split closes), so memory stays bounded by one chunk of documents whatever the corpus size.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import numpy as np

from lmlab.atomic import sha256_of
from lmlab.data.errors import DataError

OFFSET_DTYPE = np.dtype("<i8")
COPY_TOKENS = 1 << 20  # tokens copied at a time when parts are joined


def token_dtype(vocab_size: int) -> np.dtype:
    if vocab_size <= 2**16:
        return np.dtype(np.uint16)
    if vocab_size <= 2**32:
        return np.dtype(np.uint32)
    raise DataError(f"a vocabulary of {vocab_size} ids does not fit in uint32 token shards")


def pack_documents(documents: list[list[int]], eos: int, dtype: np.dtype) -> np.ndarray:
    """The documents' ids as one flat array, each followed by [EOS]."""
    flat = np.empty(sum(map(len, documents)) + len(documents), dtype=dtype)
    cursor = 0
    for ids in documents:
        flat[cursor: cursor + len(ids)] = ids
        cursor += len(ids)
        flat[cursor] = eos
        cursor += 1
    return flat


class _OffsetFile:
    """int64 rows of `columns` appended to a raw file, turned into an .npy on close."""

    def __init__(self, path: Path, columns: int) -> None:
        self.path, self.columns, self.rows = path, columns, 0
        self.raw = path.with_suffix(".raw")
        self.file = open(self.raw, "wb")

    def append(self, rows: np.ndarray) -> None:
        self.file.write(np.ascontiguousarray(rows, dtype=OFFSET_DTYPE).tobytes())
        self.rows += len(rows)

    def close(self) -> None:
        self.file.close()
        header = {"descr": OFFSET_DTYPE.str, "fortran_order": False,
                  "shape": (self.rows, self.columns)}
        with open(self.path, "wb") as out, open(self.raw, "rb") as raw:
            np.lib.format.write_array_header_1_0(out, header)
            shutil.copyfileobj(raw, out)
        self.raw.unlink()


class TokenWriter:
    """Appends documents (each ending with [EOS]) and their sentences to one split."""

    def __init__(self, directory: Path, split: str, vocab_size: int) -> None:
        self.directory, self.split = Path(directory), split
        self.dtype = token_dtype(vocab_size)
        self.file = open(self.directory / f"{split}.tokens.bin", "wb")
        self.hash = hashlib.sha256()
        self.documents = _OffsetFile(self.directory / f"{split}.documents.npy", 2)
        self.sentences = _OffsetFile(self.directory / f"{split}.sentences.npy", 2)
        self.num_tokens = 0

    def add(self, flat: np.ndarray, lengths: np.ndarray, sentence_starts: list[list[int]]
            ) -> None:
        """`flat` holds the documents back to back (`pack_documents`), `lengths` their token
        counts with [EOS]; `sentence_starts[d]` the offsets, within document d, where its
        second, third, ... sentence starts."""
        data = flat.astype(self.dtype, copy=False).tobytes()
        self.file.write(data)
        self.hash.update(data)
        stops = self.num_tokens + np.cumsum(lengths, dtype=np.int64)
        starts = stops - lengths
        self.documents.append(np.stack((starts, stops), axis=1))
        self.sentences.append(sentence_spans(starts, stops - 1, sentence_starts))
        self.num_tokens = int(stops[-1]) if len(stops) else self.num_tokens

    def add_part(self, directory: Path) -> None:
        """Append this split of a dataset part that another process encoded with the same
        tokenizer (preparation/datatrove_work.py): its tokens, and its offsets moved past ours."""
        if (Path(directory) / f"{self.split}.tokens.bin").stat().st_size == 0:
            return  # nothing of the part fell in this split (and an empty file maps to nothing)
        part = TokenFile(directory, self.split, self.dtype.name)
        for start in range(0, part.num_tokens, COPY_TOKENS):
            data = np.asarray(part.tokens[start: start + COPY_TOKENS]).tobytes()
            self.file.write(data)
            self.hash.update(data)
        self.documents.append(np.asarray(part.spans) + self.num_tokens)
        self.sentences.append(np.asarray(part.sentences) + self.num_tokens)
        self.num_tokens += part.num_tokens

    def close(self) -> dict:
        self.file.close()
        self.documents.close()
        self.sentences.close()
        return {"documents": self.documents.rows, "tokens": self.num_tokens,
                "sentences": self.sentences.rows, "dtype": self.dtype.name,
                "sha256": {"tokens": self.hash.hexdigest(),
                           "documents": sha256_of(self.documents.path),
                           "sentences": sha256_of(self.sentences.path)}}


def sentence_spans(starts: np.ndarray, text_stops: np.ndarray,
                   inner_starts: list[list[int]]) -> np.ndarray:
    """(sentences, 2) global spans: each document [start, text_stop) cut at its inner starts.
    A document with no text (only its [EOS]) has no sentence."""
    rows = []
    for start, stop, inner in zip(starts.tolist(), text_stops.tolist(), inner_starts,
                                  strict=True):
        cuts = [start, *(start + i for i in inner), stop]
        rows.extend((a, b) for a, b in zip(cuts, cuts[1:], strict=False) if b > a)
    return np.asarray(rows, dtype=np.int64).reshape(-1, 2)


class TokenFile:
    """A TokenSource over one split, memory-mapped: nothing is read until asked for.

    Pickles as its paths, so DataLoader workers reopen the files instead of copying them.
    """

    def __init__(self, directory: Path, split: str, dtype: str) -> None:
        self.directory, self.split, self.dtype = Path(directory), split, dtype
        path = self.directory / f"{split}.tokens.bin"
        if not path.is_file():
            raise DataError(f"{path} is missing: the dataset is incomplete")
        self.tokens = np.memmap(path, dtype=np.dtype(dtype), mode="r")
        self.spans = np.load(self.directory / f"{split}.documents.npy", mmap_mode="r")
        sentences = self.directory / f"{split}.sentences.npy"
        self.sentences = np.load(sentences, mmap_mode="r") if sentences.is_file() else None
        self.num_tokens = len(self.tokens)

    def __reduce__(self):
        return TokenFile, (self.directory, self.split, self.dtype)

    def read(self, start: int, stop: int) -> np.ndarray:
        return np.asarray(self.tokens[start:stop], dtype=np.int64)

    def document_spans(self) -> np.ndarray:
        return self.spans

    def sentence_spans(self) -> np.ndarray | None:
        """None for datasets prepared before sentence offsets were recorded."""
        return self.sentences
