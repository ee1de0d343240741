"""`lmlab compare --cluster ray`: every unfinished sub-run a Ray task holding --cpus-per-run
CPUs and --gpus-per-run GPUs, placed by Ray on whichever node of the cluster at RAY_ADDRESS has
them free.

A task runs its sub-run as a local worker does (lmlab.compare.subrun.complete), so the run
directories, the resume rule and the analysis are the same whichever engine trained them. The
tasks write on every node at the paths the driver gives them, made absolute here: the
comparison directory, the dataset and the probe and pair files must be on storage all nodes
share, at the same path.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from tqdm import tqdm

from lmlab.compare.arms import SubRun
from lmlab.compare.design import CompareConfig
from lmlab.compare.subrun import complete
from lmlab.ray_cluster import connect
from lmlab.train.loop import TrainingError


@contextmanager
def joined_cluster(cfg: CompareConfig) -> Iterator[None]:
    """The Ray cluster at RAY_ADDRESS joined, and checked to have a node that holds a sub-run,
    before the comparison writes or shows anything (a refusal leaves nothing behind); left at
    the end, unless the caller was already in a Ray job."""
    import ray

    connected_here = not ray.is_initialized()  # a caller already in a Ray job keeps its own
    if connected_here:
        connect("--cluster ray")
    try:
        _check_room(cfg)
        yield
    finally:
        if connected_here:
            ray.shutdown()


def run_on_ray(left: list[SubRun], cfg: CompareConfig, data: str, bar: tqdm) -> None:
    """Train and score the sub-runs in `left` as Ray tasks on the cluster joined
    (joined_cluster), `bar` counting those finished. A failed one is named when it fails and
    raised once the others have finished, so that their work is kept for the next run of the
    command."""
    import ray

    task = ray.remote(_complete).options(num_cpus=cfg.cpus_per_run,
                                         num_gpus=cfg.gpus_per_run)
    cfg, data = _absolute(cfg), str(Path(data).absolute())
    pending = {task.remote(replace(sub, out=sub.out.absolute()), cfg, data): sub
               for sub in left}
    failed = None
    while pending:
        (ready,), _ = ray.wait(list(pending))
        sub = pending.pop(ready)
        try:
            ray.get(ready)
            bar.update()
        except ray.exceptions.RayError as error:
            bar.write(f"{_name(sub)} failed; the other sub-runs go on")
            failed = failed or (sub, error)
    if failed:
        _raise(*failed)


def _check_room(cfg: CompareConfig) -> None:
    """Refuse what no node of the cluster can hold: Ray would wait for such a node forever."""
    import ray

    nodes = [node["Resources"] for node in ray.nodes() if node["Alive"]]
    if not any(node.get("CPU", 0) >= cfg.cpus_per_run and
               node.get("GPU", 0) >= cfg.gpus_per_run for node in nodes):
        most = max(nodes, key=lambda node: (node.get("GPU", 0), node.get("CPU", 0)),
                   default={})
        raise ValueError(f"--cluster ray: no node has {cfg.cpus_per_run} CPUs and "
                         f"{cfg.gpus_per_run} GPUs free for a sub-run (the largest has "
                         f"{most.get('CPU', 0):g} CPUs, {most.get('GPU', 0):g} GPUs); lower "
                         "--cpus-per-run or --gpus-per-run")


def _complete(sub: SubRun, cfg: CompareConfig, data: str) -> None:
    """One sub-run inside its task: torch uses the CPUs the task holds, and more than one GPU
    makes pre-training a torchrun job on this node, a rank per GPU (which Ray has made the
    visible ones)."""
    import torch

    torch.set_num_threads(cfg.cpus_per_run)
    complete(sub, cfg, data, ranks=max(1, cfg.gpus_per_run))


def _absolute(cfg: CompareConfig) -> CompareConfig:
    """`cfg` with the files (and the --init run) its tasks read named absolutely: a task's
    working directory is its node's, not the driver's."""
    def absolute(path: str | None) -> str | None:
        return path and str(Path(path).absolute())

    probes = tuple(replace(probe, train=absolute(probe.train),
                           validation=absolute(probe.validation), test=absolute(probe.test),
                           config=absolute(probe.config)) for probe in cfg.probes)
    return replace(cfg, probes=probes, pairs=tuple(map(absolute, cfg.pairs)),
                   init=absolute(cfg.init))


def _name(sub: SubRun) -> str:
    return f"sub-run {sub.objective} budget {sub.fraction:g} seed {sub.seed} ({sub.out})"


def _raise(sub: SubRun, error: Exception) -> None:
    """What the sub-run raised, raised here as a local worker's is: a user error stays one line,
    a bug keeps its traceback (the remote one is in `error`). A task Ray could not finish (its
    worker or node died after Ray's retries, or its error could not be sent back) is a run that
    cannot go on."""
    from ray.exceptions import RayTaskError
    if isinstance(error, RayTaskError):
        raise error.cause from error
    raise TrainingError(f"{_name(sub)} failed on the cluster: "
                        f"{str(error).splitlines()[0]}") from error
