"""Streaming helpers for `prepare`: chunks made by a background thread, and a progress bar
that shows documents/s, MB/s and the time left."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterable, Iterator
from typing import TypeVar

from tqdm import tqdm

T = TypeVar("T")
_END = object()


def chunked(items: Iterable[T], size: int) -> Iterator[list[T]]:
    chunk: list[T] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def in_background(items: Iterable[T], size: int, depth: int = 4) -> Iterator[list[T]]:
    """Chunks of `size` items, made by a thread while the caller works on earlier chunks.

    At most `depth` chunks wait, so memory stays bounded. The producer's exception (a bad
    record, say) is raised here; when the caller stops early or is interrupted, the producer
    stops at its next chunk.
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
            for chunk in chunked(items, size):
                if not put(chunk):
                    return
            put(_END)
        except BaseException as error:  # handed to the consumer, which raises it
            put(error)

    thread = threading.Thread(target=produce, name="prepare-reader", daemon=True)
    thread.start()
    try:
        while (chunk := ready.get()) is not _END:
            if isinstance(chunk, BaseException):
                raise chunk
            yield chunk
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

    def close(self) -> None:
        if self.bar.total is not None:
            self.bar.total = self.bar.n  # the input-size estimate was only an estimate
            self.bar.refresh()
        self.bar.close()
