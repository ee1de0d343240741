"""Batches made ahead in a background thread (a GPU run's input path, forced here on the CPU
without pinning) are the batches the loop makes itself, step for step, with the data state of
the step last handed over; the thread stops cleanly, also mid-run, and a failure in it reaches
the loop."""

import threading

import pytest
import torch

from lmlab.data.loader import BlockBatches
from lmlab.objectives.registry import build_objective
from lmlab.train.entry import PretrainingData
from lmlab.train.loop import step_seed
from lmlab.train.prefetch import PrefetchedData
from tests.synthetic_run import synthetic_dataset


def pretraining_data(accumulation: int = 2):
    dataset = synthetic_dataset()[1]
    objective = build_objective("mlm", dataset.special)
    blocks = BlockBatches(dataset.train, 16, 4, "concatenate", dataset.special.pad,
                          dataset.special.sep, 0, 0, 1)
    return PretrainingData(blocks, objective, accumulation, num_workers=0)


def seed_of(step: int) -> int:
    return step_seed(0, 0, step)


def same_batch(a, b) -> bool:
    return (torch.equal(a.input_ids, b.input_ids) and torch.equal(a.targets, b.targets)
            and torch.equal(a.positions, b.positions)
            and all(torch.equal(a.predict_at[h].tensor, b.predict_at[h].tensor)
                    for h in a.predict_at))


def test_batches_made_ahead_are_the_loops_own_with_its_data_state():
    plain, ahead = pretraining_data(), PrefetchedData(pretraining_data(), seed_of, pin=False)
    generator = torch.Generator()
    try:
        for step in range(3, 9):  # a resumed run starts past 0
            generator.manual_seed(seed_of(step))
            expected = plain.micro_batches(step, generator)
            got = ahead.micro_batches(step, torch.Generator())
            assert len(got) == len(expected) == 2
            assert all(same_batch(a, b) for a, b in zip(got, expected, strict=True))
            assert ahead.state_dict() == plain.state_dict()
    finally:
        ahead.close()


def test_the_thread_stops_cleanly_mid_run():
    ahead = PrefetchedData(pretraining_data(), seed_of, pin=False)
    ahead.micro_batches(0, torch.Generator())
    thread = ahead._thread
    ahead.close()
    assert not thread.is_alive() and ahead._thread is None
    assert "lmlab-batches" not in [t.name for t in threading.enumerate()]


def test_a_failure_while_making_batches_reaches_the_loop():
    class Broken:
        def micro_batches(self, step, generator):
            raise ValueError("a shard could not be read")

        def state_dict(self):
            return {}

    ahead = PrefetchedData(Broken(), seed_of, pin=False)
    with pytest.raises(ValueError, match="a shard could not be read"):
        ahead.micro_batches(0, torch.Generator())
    ahead.close()
