"""Fixed-length token blocks for training: deterministic, rank-sharded and resumable.

The order of an epoch is a permutation seeded by (seed, epoch); the i-th batch of all ranks
together is the next contiguous run of it, rank r taking the r-th slice (all ranks get the
same count, so data-parallel steps stay in lock-step). A batch
is addressed by a global index g (epoch = g // batches_per_epoch), so resuming is arithmetic,
never a replay of consumed data. With DataLoader workers, worker i builds batches g ≡ i
(mod workers) and the DataLoader's round-robin hands them out in the same order as one
process would.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from lmlab.data.errors import DataError
from lmlab.data.packing import BlockPieces, best_fit_plan, concatenate_plan, sentence_rows

Packing = Literal["concatenate", "best_fit", "sentences"]


class TokenSource(Protocol):
    """A flat token stream in which every document ends with [EOS]."""

    num_tokens: int

    def read(self, start: int, stop: int) -> np.ndarray: ...

    def document_spans(self) -> np.ndarray: ...  # (documents, 2) global [start, stop)

    def sentence_spans(self) -> np.ndarray | None: ...  # (sentences, 2) global [start, stop)


@dataclass
class ArraySource:
    """A TokenSource over an in-memory array (small data and tests)."""

    tokens: np.ndarray
    spans: np.ndarray
    sentences: np.ndarray | None = None

    @property
    def num_tokens(self) -> int:
        return len(self.tokens)

    def read(self, start: int, stop: int) -> np.ndarray:
        return self.tokens[start:stop]

    def document_spans(self) -> np.ndarray:
        return self.spans

    def sentence_spans(self) -> np.ndarray | None:
        return self.sentences


@dataclass(frozen=True)
class TokenBlocks:
    """One micro-batch of packed blocks, before an objective makes it a model Batch."""

    tokens: torch.Tensor  # (batch_size, block_len) int64
    epoch: int
    index: int  # global batch index; resume from index + 1


class BlockBatches(IterableDataset):
    """An endless stream of (batch_size, block_len) token batches, epoch after epoch."""

    def __init__(self, source: TokenSource, block_len: int, batch_size: int,
                 packing: Packing = "concatenate", pad_id: int = 0, sep_id: int | None = None,
                 seed: int = 0, rank: int = 0, world_size: int = 1) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is outside a world of {world_size}")
        self.source, self.block_len, self.batch_size = source, block_len, batch_size
        self.packing, self.pad_id, self.sep_id = packing, pad_id, sep_id
        self.seed, self.rank, self.world_size = seed, rank, world_size
        self.rows: BlockPieces | None = None
        if packing == "concatenate":
            num_blocks = concatenate_plan(source.num_tokens, block_len)
        elif packing == "best_fit":
            self.rows = BlockPieces.from_lists(best_fit_plan(source.document_spans(), block_len))
            num_blocks = len(self.rows)
        elif packing == "sentences":
            sentences = source.sentence_spans()
            if sentences is None:
                raise DataError("this dataset has no sentence offsets, which sentence pairs "
                                "(NSP) need; a directory from an older lmlab prepare must be "
                                "prepared again")
            if sep_id is None:
                raise ValueError("sentence packing needs a sep token to put between sentences")
            self.rows = sentence_rows(sentences, source.document_spans(), block_len)
            num_blocks = len(self.rows)
        else:
            raise ValueError(f"unknown packing {packing!r}")
        self.num_blocks = num_blocks
        # Blocks beyond whole batches on every rank wait for a later epoch's permutation.
        self.batches_per_epoch = num_blocks // (batch_size * world_size)
        if self.batches_per_epoch == 0:
            raise DataError(f"the dataset gives {num_blocks} blocks of {block_len} tokens: "
                            f"too few for one batch of {batch_size} on each of {world_size} "
                            "ranks")
        self.next_index = 0
        self._order: tuple[int, np.ndarray | None] = (-1, None)

    def state_dict(self, last: TokenBlocks | None = None) -> dict:
        """Where to resume: after `last` (the latest batch consumed), else where it stands."""
        return {"next_index": last.index + 1 if last is not None else self.next_index,
                "seed": self.seed}

    def load_state_dict(self, state: dict) -> None:
        if state["seed"] != self.seed:
            raise ValueError(f"the saved data position is for seed {state['seed']}, "
                             f"not {self.seed}")
        self.next_index = int(state["next_index"])

    def epoch_order(self, epoch: int) -> np.ndarray:
        """All block ids in `epoch`'s order (a permutation seeded by (seed, epoch)), drawn
        once per epoch rather than once per batch."""
        if self._order[0] != epoch:
            self._order = epoch, np.random.default_rng([self.seed, epoch]).permutation(
                self.num_blocks)
        return self._order[1]

    def block(self, block_id: int) -> np.ndarray:
        if self.rows is None:
            start = block_id * self.block_len
            return self.source.read(start, start + self.block_len)
        out = np.full(self.block_len, self.pad_id, dtype=np.int64)
        cursor = 0
        for i, (start, stop) in enumerate(self.rows[block_id].tolist()):
            if self.packing == "sentences" and i:
                out[cursor] = self.sep_id
                cursor += 1
            out[cursor: cursor + stop - start] = self.source.read(start, stop)
            cursor += stop - start
        return out

    def batch(self, index: int) -> TokenBlocks:
        epoch, within = divmod(index, self.batches_per_epoch)
        # Micro-batch `index` of every rank together is one contiguous run of the epoch's order,
        # so N ranks × batch b consume exactly the blocks one process takes in N batches.
        start = (within * self.world_size + self.rank) * self.batch_size
        ids = self.epoch_order(epoch)[start: start + self.batch_size]
        tokens = np.stack([self.block(int(i)) for i in ids]).astype(np.int64)
        return TokenBlocks(torch.from_numpy(tokens), epoch, index)

    def __iter__(self) -> Iterator[TokenBlocks]:
        worker = get_worker_info()
        step, offset = (1, 0) if worker is None else (worker.num_workers, worker.id)
        index = self.next_index + offset
        while True:
            yield self.batch(index)
            index += step
