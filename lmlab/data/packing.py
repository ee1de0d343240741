"""Packing plans: which tokens make up each fixed-length block. Pure and deterministic.

Documents are given as global (start, stop) token spans of a flat stream in which every
document already ends with [EOS], so objectives can tell documents apart from the ids alone.

    concatenate   block k = stream[k·L : (k+1)·L]          no padding, documents cut anywhere
    best_fit      whole documents (split only if longer    padding at block ends, documents
                  than L) packed by best-fit decreasing    cut only when longer than a block
    sentences     consecutive sentences of one document    one document per row, for NSP
                  per row, joined with [SEP]
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

Piece = tuple[int, int]  # a (start, stop) span of the flat token stream
SCAN_CHUNK = 1 << 16


@dataclass(frozen=True)
class BlockPieces:
    """Blocks as runs of pieces, in two arrays rather than a Python object per piece, so a
    plan over millions of sentences stays small: block b is pieces[starts[b]:starts[b + 1]]."""

    pieces: np.ndarray  # (pieces, 2) int64 spans
    starts: np.ndarray  # (blocks + 1,) int64

    @classmethod
    def from_lists(cls, blocks: list[list[Piece]]) -> BlockPieces:
        pieces = np.array([p for block in blocks for p in block], dtype=np.int64).reshape(-1, 2)
        return cls(pieces, np.cumsum([0] + [len(block) for block in blocks], dtype=np.int64))

    def __len__(self) -> int:
        return len(self.starts) - 1

    def __getitem__(self, block: int) -> np.ndarray:
        return self.pieces[self.starts[block]: self.starts[block + 1]]


def concatenate_plan(num_tokens: int, block_len: int) -> int:
    """The number of full blocks of the stream (the last partial block is dropped)."""
    return num_tokens // block_len


def document_chunks(spans: np.ndarray, block_len: int) -> list[Piece]:
    """Each document span, cut into pieces of at most `block_len` tokens."""
    pieces = []
    for start, stop in spans.tolist():
        pieces.extend((s, min(s + block_len, stop)) for s in range(start, stop, block_len))
    return pieces


def best_fit_plan(spans: np.ndarray, block_len: int) -> list[list[Piece]]:
    """Best-fit decreasing: longest pieces first, each into the fullest block it still fits.

    Uses a sorted list of (free space, block id), so planning n pieces is O(n log n) search
    plus list moves, fast enough for millions of documents.
    """
    pieces = sorted(document_chunks(spans, block_len), key=lambda p: p[0] - p[1])
    blocks: list[list[Piece]] = []
    free: list[tuple[int, int]] = []  # (free tokens, block id), ascending
    for piece in pieces:
        size = piece[1] - piece[0]
        slot = bisect.bisect_left(free, (size, -1))
        if slot == len(free):
            blocks.append([piece])
            remaining, block_id = block_len - size, len(blocks) - 1
        else:
            space, block_id = free.pop(slot)
            blocks[block_id].append(piece)
            remaining = space - size
        if remaining > 0:
            bisect.insort(free, (remaining, block_id))
    return blocks


def sentence_rows(sentences: np.ndarray, documents: np.ndarray, block_len: int) -> BlockPieces:
    """Group each document's consecutive sentences (global spans, in stream order) into rows
    whose sentences plus one [SEP] between each (and the three specials NSP adds) fit in
    `block_len`. A row never mixes documents; documents with a single sentence still give a
    row (NSP halves it). An over-long sentence is truncated to the row."""
    budget = block_len - 3
    pieces = np.array(sentences, dtype=np.int64).reshape(-1, 2)
    pieces[:, 1] = np.minimum(pieces[:, 1], pieces[:, 0] + budget)
    document_of = np.searchsorted(documents[:, 1], pieces[:, 0], side="right")
    lengths = pieces[:, 1] - pieces[:, 0]
    starts = [0]
    used, row_document = 0, -1
    for first in range(0, len(pieces), SCAN_CHUNK):  # Python ints a chunk at a time
        window = slice(first, first + SCAN_CHUNK)
        for index, (length, document) in enumerate(
                zip(lengths[window].tolist(), document_of[window].tolist(), strict=True),
                start=first):
            cost = length + (1 if used else 0)  # a [SEP] before every sentence but the first
            if index and (document != row_document or used + cost > budget):
                starts.append(index)
                used, cost = 0, length
            used += cost
            row_document = document
    if len(pieces):
        starts.append(len(pieces))
    return BlockPieces(pieces, np.array(starts, dtype=np.int64))
