"""datatrove, quiet: what its tasks and its executor log goes to files in the work folder, not
to the terminal, so that a stage shows as the one line lmlab prints for it and a bad input as
the one line lmlab raises (a failed task's traceback stays in its log). `--verbose` gives
datatrove's own output as well."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import datatrove.executor.base as executor_base
from datatrove.executor import LocalPipelineExecutor
from datatrove.utils.logging import setup_default_logger
from loguru import logger

# datatrove's own format for its task logs, without the colour markup
FORMAT = "{time:YYYY-MM-DD HH:mm:ss.SSS} | {level: <8} | {name}:{function}:{line} - {message}"


@contextmanager
def datatrove_logs_in(path: Path, verbose: bool) -> Iterator[None]:
    """What datatrove logs in this process goes to `path` alone (verbose: also to stderr, as
    datatrove does by default)."""
    if verbose:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    logger.remove()
    logger.add(path, level="DEBUG", format=FORMAT)
    try:
        yield
    finally:
        setup_default_logger()  # as datatrove leaves loguru: one sink, stderr


class QuietLocalExecutor(LocalPipelineExecutor):
    """datatrove's local executor whose tasks log to their files in the logging folder
    (logs/task_NNNNN.log) only; the task runs in a worker process, so the quiet loggers are
    put in place there, around each task."""

    def _run_for_rank(self, rank: int, local_rank: int = 0, node_rank: int = -1):
        added, closed = executor_base.add_task_logger, executor_base.close_task_logger
        executor_base.add_task_logger, executor_base.close_task_logger = _to_file, _close
        try:
            return super()._run_for_rank(rank, local_rank, node_rank)
        finally:
            executor_base.add_task_logger, executor_base.close_task_logger = added, closed


def _to_file(logging_dir, rank: int, local_rank: int = 0, node_rank: int = -1):
    """datatrove's add_task_logger without its stderr sink."""
    logger.remove()
    logfile = logging_dir.open(f"logs/task_{rank:05d}.log", "w")
    logger.add(logfile, level="DEBUG", format=FORMAT)
    logger.info(f"Launching pipeline for {rank=}")
    return logfile


def _close(logfile) -> None:
    logger.complete()
    logger.remove()
    logfile.close()


def local_executor(verbose: bool) -> type[LocalPipelineExecutor]:
    """datatrove's own local executor when verbose, else the quiet one."""
    return LocalPipelineExecutor if verbose else QuietLocalExecutor
