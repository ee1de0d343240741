"""Streaming helpers for `prepare`: bounded chunks of documents, made by a background thread
if need be, and a progress bar that shows documents/s, MB/s and the time left."""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Iterable, Iterator
from typing import TypeVar

from tqdm import tqdm

T = TypeVar("T")
_END = object()


# A chunk is the unit of work that bounds memory: its encodings cost the tokenizer about a
# hundred bytes per token, so a chunk is capped in characters as well as in documents, and
# the cap grows with the cores that encode it in parallel.
CHUNK_DOCUMENTS = 256
CHUNK_CHARS = (128 << 10) * (os.cpu_count() or 1)


def chunked(texts: Iterable[str], max_documents: int = CHUNK_DOCUMENTS,
            max_chars: int = CHUNK_CHARS) -> Iterator[list[str]]:
    """Lists of at most `max_documents` texts and `max_chars` characters (a longer text goes
    alone)."""
    chunk: list[str] = []
    chars = 0
    for text in texts:
        if chunk and (len(chunk) == max_documents or chars + len(text) > max_chars):
            yield chunk
            chunk, chars = [], 0
        chunk.append(text)
        chars += len(text)
    if chunk:
        yield chunk


def in_background(items: Iterable[T], depth: int = 4) -> Iterator[T]:
    """The items of `items`, made by a thread while the caller works on earlier ones.

    At most `depth` items wait, so memory stays bounded. The producer's exception (a bad
    record, say) is raised here; when the caller stops early or is interrupted, the producer
    stops at its next item.
    """
    ready: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(value) -> bool:
        while not stop.is_set():
            try:
                ready.put(value, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not put(item):
                    return
            put(_END)
        except BaseException as error:  # handed to the consumer, which raises it
            put(error)

    thread = threading.Thread(target=produce, name="prepare-reader", daemon=True)
    thread.start()
    try:
        while (item := ready.get()) is not _END:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        thread.join(timeout=5)


class Progress:
    """A tqdm bar in bytes of text (MB/s and ETA come from `total_bytes`), with documents/s."""

    def __init__(self, description: str, total_bytes: int | None) -> None:
        self.bar = tqdm(total=total_bytes, desc=description, unit="B", unit_scale=True,
                        dynamic_ncols=True)
        self.documents = 0
        self.start = time.perf_counter()

    def update(self, documents: int, size_bytes: int) -> None:
        self.documents += documents
        if self.bar.total is not None and self.bar.n + size_bytes > self.bar.total:
            self.bar.total = self.bar.n + size_bytes  # an estimate that fell short
        rate = self.documents / max(time.perf_counter() - self.start, 1e-9)
        self.bar.set_postfix_str(f"{self.documents:,} docs, {rate:,.0f} docs/s", refresh=False)
        self.bar.update(size_bytes)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, kind, error, traceback) -> None:
        """Leave the finished bar; a failed step's bar is cleared, so that the error alone
        says what happened."""
        if kind is not None:
            self.bar.leave = False
        elif self.bar.total is not None:
            self.bar.total = self.bar.n  # the input-size estimate was only an estimate
            self.bar.refresh()
        self.bar.close()
