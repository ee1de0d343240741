"""What a run says while nothing else moves: before its first step, what it is doing (the first
step also warms up, and compiles the model when asked), then, from its first measured steps, its
pace in steps per second and when it should end, revised as steps come where the pace has
moved that end; and the tokens per second each log line reports. The progress bar moves only
at log steps, which on a slow machine can be many minutes apart; these lines come at once. Any
loop (pre-training, fine-tuning, a comparison's runs, distillation) reports through one
`Pace`."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timedelta

MEASURED_STEPS = 2  # after the first, which warms up: the steps the pace is measured on
# The first steps after the warm-up can run at another pace than the rest (allocations
# settling, a busy machine freeing up): the end is re-estimated each time the steps measured
# double, from the pace of the latest half, and said again when it moved by more than this
# share of the time that was left.
REVISED_SHARE = 0.1


def duration(seconds: float) -> str:
    """4.2 s, 3 min 20 s, 2 h 05 min."""
    if seconds < 60:
        return f"{seconds:.2g} s" if seconds < 10 else f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"


class Pace:
    """Lines about the first steps of a run going from `first_step` to its total steps,
    written with `write` (a progress bar's, so that they do not tear it)."""

    def __init__(self, write: Callable[[str], None], first_step: int = 0,
                 clock: Callable[[], float] = time.perf_counter,
                 now: Callable[[], datetime] = datetime.now) -> None:
        self.write, self.first_step, self.clock, self.now = write, first_step, clock, now
        self.started = self.first_done = 0.0
        # the last estimate: its step, its clock reading, and the end it said on the clock
        # (None until said)
        self.checked: tuple[int, float, float | None] = (first_step, 0.0, None)

    def starting(self, total_steps: int, compiling: bool) -> None:
        """Before the first step."""
        self.started = self.clock()
        work = "compiles the model and warms up" if compiling else "warms up"
        self.write(f"training: step {self.first_step + 1} of {total_steps} starts (it also "
                   f"{work}, so it takes longest)")

    def step_done(self, step: int, total_steps: int) -> None:
        """After each step: a line after the first, then an estimate of the end each time the
        steps measured since it double, from MEASURED_STEPS on."""
        taken = step - self.first_step
        measured = taken - 1
        if taken == 1:
            self.first_done = self.clock()
            seconds = self.first_done - self.started
            self.write(f"step {step} of {total_steps} took {duration(seconds)}, warm-up "
                       f"included; the pace follows from the next {MEASURED_STEPS} steps")
            self.checked = (step, self.first_done, None)
        elif (measured >= MEASURED_STEPS and measured & (measured - 1) == 0
              and step < total_steps):  # a power of two
            self._estimate(step, total_steps)

    def _estimate(self, step: int, total_steps: int) -> None:
        """The end at the pace since the last estimate: said the first time, and again where
        it moved by more than REVISED_SHARE of the time then left."""
        since_step, since, said_end = self.checked
        now = self.clock()
        seconds = max(now - since, 1e-9) / (step - since_step)
        left = (total_steps - step) * seconds
        if said_end is None or abs(now + left - said_end) > REVISED_SHARE * (said_end - since):
            end = self.now() + timedelta(seconds=left)
            self.write(("" if said_end is None else "the pace revised: ")
                       + f"{1 / seconds:.3g} steps/s ({duration(seconds)} a step): "
                       f"{total_steps - step} steps left, expected to end at {end:%H:%M} "
                       f"(in {duration(left)})")
            said_end = now + left
        self.checked = (step, now, said_end)


class Throughput:
    """Tokens trained since the last log line, and the time they took."""

    def __init__(self) -> None:
        self.start, self.tokens = time.perf_counter(), 0

    def add(self, tokens: int) -> None:
        self.tokens += tokens

    def take(self) -> float:
        """Tokens per second since the last call, and start again."""
        rate = self.tokens / max(time.perf_counter() - self.start, 1e-9)
        self.start, self.tokens = time.perf_counter(), 0
        return rate
