"""Token streams on disk: one flat array of ids per split, memory-mapped on read.

    SPLIT.tokens.bin     ids as uint16 (vocabularies up to 65,536) or uint32, every document
                         followed by [EOS]
    SPLIT.documents.npy  int64 (documents, 2): each document's [start, stop) in the stream

Tokens are appended in chunks as they are encoded, so memory stays bounded by the chunk.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from lmlab.data.errors import DataError


def token_dtype(vocab_size: int) -> np.dtype:
    if vocab_size <= 2**16:
        return np.dtype(np.uint16)
    if vocab_size <= 2**32:
        return np.dtype(np.uint32)
    raise DataError(f"a vocabulary of {vocab_size} ids does not fit in uint32 token shards")


class TokenWriter:
    """Appends documents (each ending with [EOS]) to SPLIT.tokens.bin in `directory`."""

    def __init__(self, directory: Path, split: str, vocab_size: int) -> None:
        self.directory, self.split = Path(directory), split
        self.dtype = token_dtype(vocab_size)
        self.file = open(self.directory / f"{split}.tokens.bin", "wb")  # noqa: SIM115
        self.lengths: list[int] = []

    def add(self, documents: list[list[int]], eos: int) -> None:
        for ids in documents:
            array = np.fromiter((*ids, eos), dtype=self.dtype, count=len(ids) + 1)
            self.file.write(array.tobytes())
            self.lengths.append(len(array))

    def close(self) -> dict:
        self.file.close()
        stops = np.cumsum(np.asarray(self.lengths, dtype=np.int64))
        spans = np.stack((stops - np.asarray(self.lengths, dtype=np.int64), stops), axis=1)
        np.save(self.directory / f"{self.split}.documents.npy", spans.reshape(-1, 2))
        return {"documents": len(self.lengths), "tokens": int(stops[-1]) if len(stops) else 0,
                "dtype": self.dtype.name}


class TokenFile:
    """A TokenSource over one split, memory-mapped: nothing is read until asked for."""

    def __init__(self, directory: Path, split: str, dtype: str) -> None:
        path = Path(directory) / f"{split}.tokens.bin"
        if not path.is_file():
            raise DataError(f"{path} is missing: the dataset is incomplete")
        self.tokens = np.memmap(path, dtype=np.dtype(dtype), mode="r")
        self.spans = np.load(Path(directory) / f"{split}.documents.npy")
        self.num_tokens = len(self.tokens)

    def read(self, start: int, stop: int) -> np.ndarray:
        return np.asarray(self.tokens[start:stop], dtype=np.int64)

    def document_spans(self) -> np.ndarray:
        return self.spans

    def sentence_spans(self) -> None:
        return None  # sentence offsets are not recorded yet
