"""Stopping a run cleanly on SIGINT or SIGTERM: the request the loop polls after each step, and
the exception that ends the command once the checkpoint is saved."""

from __future__ import annotations

import signal


class RunStopped(KeyboardInterrupt):
    """A run stopped by SIGINT or SIGTERM once its checkpoint was saved: the command exits
    128 + the signal's number (130 for Ctrl-C), as an interrupted shell command does."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class StopRequest:
    """SIGINT / SIGTERM end the run after the current step (under torchrun, at the next log
    step, where the ranks agree), with a checkpoint."""

    def __init__(self) -> None:
        self.requested = False
        self.signum = signal.SIGINT
        self.previous = {s: signal.signal(s, self._handle) for s in (signal.SIGINT,
                                                                     signal.SIGTERM)}

    def _handle(self, signum, frame) -> None:
        self.requested = True
        self.signum = signum

    def restore(self) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)
