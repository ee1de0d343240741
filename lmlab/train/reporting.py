"""What a run reports while it trains: metrics.jsonl (and the trackers fed from its records;
lmlab.runs.metrics reads it back), a progress bar with rate and ETA, and the curves plot at
the end."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from tqdm import tqdm

from lmlab.atomic import atomic_write
from lmlab.runs.layout import METRICS
from lmlab.runs.metrics import read_metrics
from lmlab.runs.plots import plot_training_curves

if TYPE_CHECKING:
    from lmlab.train.trackers import Tracker

class MetricsLog:
    """One JSON record per line, flushed as written, so a crash loses at most one line; each
    record goes on to the `trackers`, which are finished with the curves (if drawn) on close.
    Every record holds `seconds`: wall time since this log was opened (for a resumed run, since
    the resume), so quality can be read against time."""

    def __init__(self, run_dir: Path, enable: bool = True,
                 trackers: Sequence[Tracker] = ()) -> None:
        self.run_dir, self.enable, self.trackers = Path(run_dir), enable, trackers
        self.path = self.run_dir / METRICS
        self.file = None
        self.curves = None
        self.started = time.perf_counter()

    def truncate_after(self, step: int) -> None:
        """Drop records past `step` (a resumed run redoes them), rewriting atomically."""
        if not self.enable or not self.path.is_file():
            return
        kept = [r for r in read_metrics(self.run_dir) if r.get("step", 0) <= step]
        with atomic_write(self.path) as f:
            f.writelines(json.dumps(r) + "\n" for r in kept)

    def log(self, kind: str, step: int, **scalars: float) -> None:
        if not self.enable:
            return
        if self.file is None:
            self.file = open(self.path, "a")  # kept open for the run
        record = {"kind": kind, "step": step, **scalars,
                  "seconds": round(time.perf_counter() - self.started, 3)}
        self.file.write(json.dumps(record) + "\n")
        self.file.flush()
        for tracker in self.trackers:
            tracker.log(record, step)

    def plot(self, out_path: Path, scores: tuple[str, ...] = (), title: str = "") -> None:
        plot_training_curves(read_metrics(self.run_dir), out_path, scores, title)
        self.curves = out_path

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None
        for tracker in self.trackers:
            tracker.finish(self.curves)
        self.trackers = ()


class ProgressBar:
    """A bar over the run's steps with loss, lr and tokens/s; tqdm supplies rate and ETA."""

    def __init__(self, total_steps: int, initial: int = 0, enable: bool = True) -> None:
        self.bar = tqdm(total=total_steps, initial=initial, disable=not enable, unit="step",
                        dynamic_ncols=True)

    def update(self, step: int, loss: float, lr: float, tokens_per_second: float) -> None:
        self.bar.update(step - self.bar.n)
        self.bar.set_postfix(loss=f"{loss:.4f}", lr=f"{lr:.2e}",
                             tok_s=f"{tokens_per_second:,.0f}", refresh=False)

    def write(self, line: str) -> None:
        """A line of its own above the bar (none when the bar is disabled)."""
        if not self.bar.disable:
            tqdm.write(line, file=sys.stdout)
            sys.stdout.flush()

    def set_total(self, total_steps: int) -> None:
        self.bar.total = total_steps
        self.bar.refresh()

    def close(self) -> None:
        self.bar.close()
