"""No stretch of a run is silent: it says what it does before its first step (timing a step
for a time budget, tokenising a task's files, warming up or compiling), then how long the first
step took and, from the next steps, its pace and when it should end; for pre-training,
fine-tuning and a comparison's runs alike (all step through train/loop.py's one Pace)."""

from __future__ import annotations

import re
from datetime import datetime

import numpy as np
import pytest

from lmlab.cli import main
from lmlab.config.training import TrainConfig
from lmlab.data.dataset import in_memory_dataset
from lmlab.data.special_tokens import SpecialTokens
from lmlab.train.entry import pretrain
from lmlab.train.pace import Pace, duration

PACE_LINE = re.compile(r"^[\d.e+-]+ steps/s \(.+ a step\): \d+ steps left, expected to end at "
                       r"\d\d:\d\d \(in .+\)$")


def paced(out: str, first: str) -> list[str]:
    """The lines of `out` from `first` on (a run may say other things before it)."""
    lines = out.splitlines()
    return lines[lines.index(first):]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_first_step_then_the_pace_of_the_next_two_and_the_end():
    lines, clock = [], Clock()
    pace = Pace(lines.append, first_step=10, clock=clock,
                now=lambda: datetime(2026, 1, 1, 12, 0))
    pace.starting(110, compiling=True)
    assert lines == ["training: step 11 of 110 starts (it also compiles the model and warms up, "
                     "so it takes longest)"]
    clock.now += 95  # the first step: warm-up and compilation
    pace.step_done(11, 110)
    assert lines[-1] == ("step 11 of 110 took 1 min 35 s, warm-up included; the pace follows "
                         "from the next 2 steps")
    clock.now += 4
    pace.step_done(12, 110)
    clock.now += 4
    pace.step_done(13, 110)
    # 97 steps left at 4 s: 388 s, from 12:00
    assert lines[-1] == ("0.25 steps/s (4 s a step): 97 steps left, expected to end at 12:06 "
                         "(in 6 min 28 s)")
    for step in range(14, 111):
        clock.now += 4
        pace.step_done(step, 110)
    assert len(lines) == 3  # at a steady pace nothing more: the progress bar goes on


def test_the_end_is_re_estimated_as_steps_come_and_said_again_where_it_moved():
    """A first estimate from slow early steps is revised from the pace of the latest half of
    the steps measured, each time they double, where the end moved by more than a tenth of
    the time then left (a fine-tuning run first said 20 min 28 s for what took 11.5 min)."""
    lines, clock = [], Clock()
    pace = Pace(lines.append, clock=clock, now=lambda: datetime(2026, 1, 1, 12, 0))
    pace.starting(1000, compiling=False)
    clock.now += 30
    pace.step_done(1, 1000)
    for step in range(2, 4):  # two slow steps: 2 s each
        clock.now += 2
        pace.step_done(step, 1000)
    assert lines[-1] == ("0.5 steps/s (2 s a step): 997 steps left, expected to end at 12:33 "
                         "(in 33 min 14 s)")
    said = len(lines)
    for step in range(4, 6):  # then 1 s a step: steps 4 and 5 double the steps measured
        clock.now += 1
        pace.step_done(step, 1000)
    # from the pace of steps 4-5: 995 s left, not 2 × 995; the start of the clock is 12:00
    assert lines[said:] == ["the pace revised: 1 steps/s (1 s a step): 995 steps left, "
                            "expected to end at 12:16 (in 16 min 35 s)"]
    for step in range(6, 1000):  # steady from then on: estimated again, never said again
        clock.now += 1.05  # 5% off: within the tenth a revision needs
        pace.step_done(step, 1000)
    assert len(lines) == said + 1


def test_a_run_too_short_to_measure_says_only_its_first_step():
    lines = []
    pace = Pace(lines.append, clock=Clock())
    pace.starting(2, compiling=False)
    pace.step_done(1, 2)
    pace.step_done(2, 2)
    assert len(lines) == 2 and "warms up" in lines[0] and "compiles" not in lines[0]


@pytest.mark.parametrize(("seconds", "shown"), [(4.24, "4.2 s"), (42.4, "42 s"),
                                                (200, "3 min 20 s"), (7500, "2 h 05 min")])
def test_durations_read_as_a_person_says_them(seconds, shown):
    assert duration(seconds) == shown


def test_a_pretraining_run_says_what_it_does_before_and_after_its_first_steps(tmp_path,
                                                                              capsys):
    rng = np.random.default_rng(0)
    special = SpecialTokens.layout(80, n_sentinels=10)
    documents = [rng.integers(20, 80, 40) for _ in range(60)]
    dataset = in_memory_dataset(documents[:50], documents[50:], special)
    pretrain(TrainConfig(objective="mlm", model="bert-tiny", seq_len=16, batch_size=4, steps=5,
                         out=str(tmp_path / "steps")), dataset)
    lines = paced(capsys.readouterr().out, "training: step 1 of 5 starts (it also warms up, "
                                           "so it takes longest)")
    assert lines[1].startswith("step 1 of 5 took ")
    assert PACE_LINE.match(lines[2]), lines[2]
    pretrain(TrainConfig(objective="mlm", model="bert-tiny", seq_len=16, batch_size=4,
                         minutes=0.02, out=str(tmp_path / "minutes")), dataset)
    assert "timing one training step to fit the run into 0.02 minutes\n" in (
        capsys.readouterr().out)


def test_fine_tuning_says_it_tokenises_then_its_pace(tmp_path, capsys):
    from lmlab.export.importer import import_hf
    from tests.test_finetune_pooling import labelled
    from tests.test_hf_import import saved_bert

    saved_bert(tmp_path / "hf", class_name="BertModel")
    run = import_hf(tmp_path / "hf", tmp_path / "run").out
    data = labelled(tmp_path)
    capsys.readouterr()
    assert main(["finetune", str(run), "--train", str(data), "--validation", str(data),
                 "--out", str(tmp_path / "ft"), "--steps", "4", "--batch-size", "4"]) == 0
    out = capsys.readouterr().out
    assert "tokenising 16 training and 16 validation examples\n" in out
    lines = paced(out, "training: step 1 of 4 starts (it also warms up, so it takes longest)")
    assert lines[1].startswith("step 1 of 4 took ") and PACE_LINE.match(lines[2])
