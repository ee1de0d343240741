"""`prepare` on every core: the work done document by document runs in worker processes, a
chunk of documents at a time, and comes back in input order, so the dataset is byte for byte
the one a single process makes.

    reading      this process (prepare's background thread), chunk by chunk
    examining    workers: normalisation, control characters, the exact-dedup digest, the
                 quality rules and the near-dedup band keys of each document (cleaning.py)
    deciding     this process, in input order: exact and near duplicates (Cleaner)
    encoding     workers: each document's token ids (one tokenizer thread per worker), split,
                 UTF-8 size and sentence offsets
    writing      this process: shards, offsets, statistics (preparation/encode.py)

At most AHEAD chunks per worker wait at each stage, so memory stays bounded. With one worker
everything runs here, the tokenizer encoding a chunk in its own threads while the previous
one is written.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache, partial
from multiprocessing import get_context
from pathlib import Path

import numpy as np
from tokenizers import Encoding, Tokenizer

from lmlab.data.preparation.cleaning import (
    Cleaner,
    CleaningConfig,
    CleaningReport,
    clean,
    examine,
    split_of,
)
from lmlab.data.preparation.near_dedup import NearDedupConfig, NearDeduplicator
from lmlab.data.preparation.sentences import sentence_starts, token_starts
from lmlab.data.preparation.streaming import chunked

PARALLEL_MIN_BYTES = 4 << 20  # below this, starting processes costs more than they save
AHEAD = 2  # chunks in flight per worker at each stage


@dataclass(frozen=True)
class Encoded:
    """One document, ready to write: its split, the UTF-8 bytes of its text, its token ids
    and the token offsets where its second, third, ... sentence starts."""

    split: str
    size: int
    ids: np.ndarray
    starts: list[int]


def worker_count(workers: int | None, input_bytes: int | None) -> int:
    """`workers` as asked; None: every core this process may use, for inputs of at least
    PARALLEL_MIN_BYTES, else one."""
    if workers is not None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        return workers
    if input_bytes is None or input_bytes < PARALLEL_MIN_BYTES:
        return 1
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))  # the cores this process may use
    return os.cpu_count() or 1


def encode_chunk(texts: list[str], encodings: list[Encoding], validation_fraction: float,
                 sentence_split: str) -> list[Encoded]:
    return [Encoded(split_of(text, validation_fraction), len(text.encode("utf-8")),
                    np.asarray(encoding.ids, dtype=np.uint32),
                    token_starts(encoding, sentence_starts(text, sentence_split)))
            for text, encoding in zip(texts, encodings, strict=True)]


class Workers:
    """Where prepare's document-by-document work runs: here (one worker) or in a pool of
    `count` processes, started on entering (before prepare starts any thread: on Linux they
    are forked) and shut down on exit."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.pool: Executor | None = None
        self.folder: tempfile.TemporaryDirectory | None = None

    def __enter__(self) -> Workers:
        if self.count > 1:
            method = "fork" if sys.platform == "linux" else "spawn"
            self.pool = ProcessPoolExecutor(self.count, mp_context=get_context(method),
                                            initializer=_start_worker)
            self.pool.submit(os.getpid).result()  # forks them all, now
        return self

    def __exit__(self, *exception) -> None:
        if self.pool is not None:
            self.pool.shutdown(cancel_futures=True)
        if self.folder is not None:
            self.folder.cleanup()

    def clean(self, documents: Iterable[str], config: CleaningConfig,
              report: CleaningReport) -> Iterator[str]:
        """cleaning.clean's documents and counts."""
        if self.pool is None:
            yield from clean(documents, config, report)
            return
        cleaner = Cleaner(config, report)
        for examined in in_order(self.pool, partial(_examine, config), chunked(documents),
                                 AHEAD * self.count):
            admitted = [(document.text, keys) for document, keys in examined
                        if cleaner.admit(document)]
            if admitted:
                texts, band_keys = map(list, zip(*admitted, strict=True))
                yield from cleaner.kept(texts, band_keys)
        cleaner.finish()

    def encoded(self, chunks: Iterable[list[str]], tokenizer: Tokenizer,
                validation_fraction: float, sentence_split: str) -> Iterator[list[Encoded]]:
        """Each chunk's documents encoded, in order."""
        if self.pool is None:
            for texts, encodings in _encoded_ahead(chunks, tokenizer):
                yield encode_chunk(texts, encodings, validation_fraction, sentence_split)
            return
        # the workers read the tokenizer from a file, once each
        self.folder = self.folder or tempfile.TemporaryDirectory(prefix="lmlab-prepare-")
        path = Path(self.folder.name) / "tokenizer.json"
        tokenizer.save(str(path))
        work = partial(_encode, str(path), validation_fraction, sentence_split)
        yield from in_order(self.pool, work, chunks, AHEAD * self.count)


def in_order(pool: Executor, work: Callable, items: Iterable, ahead: int) -> Iterator:
    """`work(item)` for each item, run in `pool` with at most `ahead` waiting, in order."""
    pending: deque[Future] = deque()
    try:
        for item in items:
            pending.append(pool.submit(work, item))
            if len(pending) >= ahead:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        for future in pending:
            future.cancel()


def _encoded_ahead(chunks: Iterable[list[str]], tokenizer: Tokenizer
                   ) -> Iterator[tuple[list[str], list[Encoding]]]:
    """(chunk, its encodings), the next chunk already encoding in the tokenizer's threads
    while the caller turns this one into token arrays and sentence offsets."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        previous = None
        for chunk in chunks:
            future = pool.submit(tokenizer.encode_batch, chunk, add_special_tokens=False)
            if previous is not None:
                yield previous[0], previous[1].result()
            previous = chunk, future
        if previous is not None:
            yield previous[0], previous[1].result()


# ---------------------------------------------------------------- in the worker processes


def _start_worker() -> None:
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # the pool runs side by side: one thread


@lru_cache(maxsize=4)
def _near_deduplicator(config: NearDedupConfig) -> NearDeduplicator:
    return NearDeduplicator(config)


@lru_cache(maxsize=2)
def _tokenizer(path: str) -> Tokenizer:
    return Tokenizer.from_file(path)


def _examine(config: CleaningConfig, texts: list[str]) -> list[tuple]:
    """(Examined, its near-dedup band keys or None) per text."""
    examined = [examine(text, config) for text in texts]
    candidates = [d.text for d in examined if d.text is not None and d.rejection is None]
    near = _near_deduplicator(config.near_dedup) if config.near_dedup else None
    band_keys = iter(near.band_keys(candidates) if near else [])
    return [(d, next(band_keys, None) if d.text is not None and d.rejection is None else None)
            for d in examined]


def _encode(tokenizer_path: str, validation_fraction: float, sentence_split: str,
            texts: list[str]) -> list[Encoded]:
    encodings = _tokenizer(tokenizer_path).encode_batch(texts, add_special_tokens=False)
    return encode_chunk(texts, encodings, validation_fraction, sentence_split)
