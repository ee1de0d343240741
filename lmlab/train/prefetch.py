"""Input ahead of the step: a step's micro-batches made in a background thread while the device
runs the steps before it, and on a GPU pinned there, so that the step's copies to the device
start at once and do not block the host (lmlab.objectives.batch.to_device).

The batches are the ones the loop would make itself: each step's randomness is re-derived from
its number (`seed_of`), as the loop derives it, and the data's resumable state is kept with each
step's batches, so a checkpoint records the state after the last step trained, not after the
last one made ahead."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

import torch

from lmlab.objectives.batch import Batch

STEPS_AHEAD = 2  # steps made ahead: enough to hide one step's making behind the device's work


class PrefetchedData:
    """A loop's StepData (`micro_batches(step, generator)`, `state_dict()`) whose batches are
    made in a background thread, `STEPS_AHEAD` steps ahead; `close()` stops the thread."""

    def __init__(self, data, seed_of: Callable[[int], int], pin: bool) -> None:
        self.data, self.seed_of, self.pin = data, seed_of, pin
        self._made: queue.Queue = queue.Queue(maxsize=STEPS_AHEAD)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._state = data.state_dict()

    def micro_batches(self, step: int, generator: torch.Generator) -> list[Batch]:
        """Step `step`'s micro-batches (the loop's `generator` is not used: the thread seeds
        its own the same way). Steps must be asked for in order."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._make, args=(step,), daemon=True,
                                            name="lmlab-batches")
            self._thread.start()
        made_step, batches, state = self._made.get()
        if isinstance(batches, BaseException):
            raise batches
        if made_step != step:
            raise RuntimeError(f"batches were made for step {made_step}, asked for {step}")
        self._state = state
        return batches

    def state_dict(self) -> dict:
        return self._state

    def close(self) -> None:
        """Stop the thread and wait for it (it may be blocked handing over a step)."""
        self._stop.set()
        while self._thread is not None and self._thread.is_alive():
            try:
                self._made.get(timeout=0.1)
            except queue.Empty:
                pass
        self._thread = None

    def _make(self, step: int) -> None:
        generator = torch.Generator()
        while not self._stop.is_set():
            try:
                generator.manual_seed(self.seed_of(step))
                batches = self.data.micro_batches(step, generator)
                if self.pin:
                    batches = [batch.pinned() for batch in batches]
                made = (step, batches, self.data.state_dict())
            except BaseException as error:  # handed to the loop, which raises it
                made = (step, error, None)
            while not self._stop.is_set():
                try:
                    self._made.put(made, timeout=0.1)
                    break
                except queue.Full:
                    continue
            if isinstance(made[1], BaseException):
                return
            step += 1
