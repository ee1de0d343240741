"""The fine-tuning data order: every row once per epoch, the same for the same seed and step
(exact resume), split over ranks without overlap, and grouped by length so that batches carry
little padding."""

import random

from lmlab.finetune.base import Row
from lmlab.finetune.data import TaskData


def rows(count: int = 1000) -> list[Row]:
    rng = random.Random(0)
    return [Row([7] * rng.randint(3, 60), [], index) for index in range(count)]


def padding_ratio(data: TaskData, examples: list[Row], steps: int) -> float:
    """Tokens computed on (each batch padded to its longest row) over real tokens."""
    padded = real = 0
    for step in range(steps):
        lengths = [len(examples[i].ids) for i in data.step_rows(step)]
        padded += max(lengths) * len(lengths)
        real += sum(lengths)
    return padded / real


def test_an_epoch_holds_every_row_and_the_order_follows_from_the_step():
    examples = rows(1000)
    data = TaskData(None, examples, None, False, batch_size=32, micro_size=32, seed=3)
    epoch = [i for step in range(data.steps_per_epoch) for i in data.step_rows(step)]
    assert set(epoch) == set(range(1000)) and len(epoch) == 32 * 32
    again = TaskData(None, examples, None, False, batch_size=32, micro_size=32, seed=3)
    assert again.step_rows(40) == data.step_rows(40) != data.step_rows(8)


def test_ranks_share_a_step_without_overlap():
    examples = rows(200)
    ranks = [TaskData(None, examples, None, False, 16, 8, seed=0, rank=r, world_size=2)
             for r in range(2)]
    first, second = (set(data.step_rows(5)) for data in ranks)
    assert len(first) == len(second) == 8 and not first & second


def test_grouping_by_length_cuts_the_padding():
    examples = rows(1000)
    grouped = TaskData(None, examples, None, False, 32, 32, seed=0)
    mixed = TaskData(None, examples, None, False, 32, 32, seed=0, group_by_length=False)
    assert padding_ratio(grouped, examples, 20) < 1.15 < 1.6 < padding_ratio(mixed, examples, 20)
