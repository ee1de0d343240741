"""The run directory: its layout, verified checkpoints, and `load_run(RUN) -> Run`."""

from lmlab.runs.run import Run, RunLoadError, load_run

__all__ = ["Run", "RunLoadError", "load_run"]
