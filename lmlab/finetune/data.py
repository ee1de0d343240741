"""Training rows → the loop's micro-batches: a fresh shuffle each epoch, every step a full
batch (the last of an epoch wraps around to its start), split over ranks and micro-batches.
Which rows a step gets follows from (seed, step) alone, so a resumed run needs no data state.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from lmlab.finetune.task import Reading, Row, Task
from lmlab.objectives.base import Batch


class TaskData:
    def __init__(self, task: Task, rows: Sequence[Row], reading: Reading, token_types: bool,
                 batch_size: int, micro_size: int, seed: int, rank: int = 0,
                 world_size: int = 1) -> None:
        self.task, self.rows, self.reading, self.token_types = task, rows, reading, token_types
        self.batch_size, self.micro_size, self.seed = batch_size, micro_size, seed
        self.rank, self.world_size = rank, world_size

    @property
    def steps_per_epoch(self) -> int:
        return math.ceil(len(self.rows) / self.batch_size)

    def step_rows(self, step: int) -> list[int]:
        """Indices of the rows this rank trains on at `step`."""
        epoch, index = divmod(step, self.steps_per_epoch)
        order = torch.randperm(len(self.rows),
                               generator=torch.Generator().manual_seed(self.seed + epoch))
        picks = torch.arange(index * self.batch_size, (index + 1) * self.batch_size)
        return order[picks % len(self.rows)][self.rank::self.world_size].tolist()

    def micro_batches(self, step: int, generator: torch.Generator) -> list[Batch]:
        mine = self.step_rows(step)
        return [self.task.batch([self.rows[i] for i in mine[start:start + self.micro_size]],
                                self.reading, self.token_types)
                for start in range(0, len(mine), self.micro_size)]

    def state_dict(self) -> dict:
        return {}
