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

import numpy as np

Piece = tuple[int, int]  # a (start, stop) span of the flat token stream


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


def sentence_rows(sentences: np.ndarray, documents: np.ndarray,
                  block_len: int) -> list[list[Piece]]:
    """Group each document's consecutive sentences (global spans, in stream order) into rows
    whose sentences plus one [SEP] between each (and the three specials NSP adds) fit in
    `block_len`. A row never mixes documents; documents with a single sentence still give a
    row (NSP halves it)."""
    budget = block_len - 3
    document_of = np.searchsorted(documents[:, 1], sentences[:, 0], side="right").tolist()
    rows: list[list[Piece]] = []
    row: list[Piece] = []
    used, row_document = 0, -1
    for (start, stop), document in zip(sentences.tolist(), document_of, strict=True):
        stop = min(stop, start + budget)  # an over-long sentence is truncated
        cost = stop - start + (1 if row else 0)
        if row and (document != row_document or used + cost > budget):
            rows.append(row)
            row, used, cost = [], 0, stop - start
        row.append((start, stop))
        used += cost
        row_document = document
    if row:
        rows.append(row)
    return rows
