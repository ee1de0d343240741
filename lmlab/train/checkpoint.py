"""Training's checkpoints: every rank's FSDP2 optimizer shard beside the weights, and pruning
old ones (the format, its atomic writing and verified reading: lmlab/runs/checkpoints.py)."""

from __future__ import annotations

import errno
import math
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor, nn

from lmlab.atomic import os_error_behind
from lmlab.runs.checkpoints import (
    CheckpointError,
    DamagedCheckpoint,
    checkpoint_name,
    list_checkpoints,
    load_checkpoint,
    previous_checkpoint,
    publish_checkpoint,
    read_state,
    remove_unfinished,
    staging_dir,
    write_durably,
)
from lmlab.train.distributed import (
    Env,
    barrier,
    full_weights,
    is_sharded,
    load_local_optimizer_state,
)


@dataclass
class LoopState:
    """Everything besides weights and optimizer that an exact resume needs."""

    step: int = 0
    total_steps: int = 0
    tokens: int = 0
    nonfinite_steps: int = 0
    nonfinite_streak: int = 0
    best_eval: float = math.inf
    best_checkpoint: str = ""
    evals_since_best: int = 0
    data: dict = field(default_factory=dict)
    # steps the new heads trained alone, fixed at the start (None: a run saved before head
    # warm-ups, which had none)
    head_warmup_steps: int | None = None


def optimizer_shard_name(rank: int) -> str:
    return f"optimizer-rank-{rank}.pt"


def save_checkpoint(directory: Path, step: int, weights: nn.Module | dict[str, Tensor],
                    state: dict, metadata: dict | None = None, shard: dict | None = None,
                    env: Env | None = None) -> Path:
    """Write weights and `state` as checkpoint `step`; returns its path.

    `weights` is a model or its `full_weights`. With `shard` (this rank's optimizer state
    under FSDP2) every rank of `env` must call this; rank 0 writes the rest and publishes.
    A write that fails (a full disk) removes the staging directory and raises a
    CheckpointError naming the checkpoint left to resume from.
    """
    main = env is None or env.is_main
    final = directory / checkpoint_name(step)
    temporary = staging_dir(final)
    try:
        if main:
            remove_unfinished(directory)
            temporary.mkdir(parents=True)
        if shard is not None:
            barrier(env)
            write_durably(temporary / optimizer_shard_name(env.rank),
                          lambda file: torch.save(shard, file))
            barrier(env)
        if main:
            tensors = full_weights(weights) if isinstance(weights, nn.Module) else weights
            publish_checkpoint(final, step, tensors, state, metadata)
    except BaseException as error:
        if main:
            shutil.rmtree(temporary, ignore_errors=True)
        cause = os_error_behind(error) if isinstance(error, Exception) else None
        if cause is None:
            raise
        raise CheckpointError(failed_save_message(cause, final)) from None
    if shard is not None:
        barrier(env)
    return final


def failed_save_message(cause: OSError, final: Path) -> str:
    reason = cause.strerror.lower() if cause.strerror else str(cause)
    fix = "free some space" if cause.errno == errno.ENOSPC else "fix that"
    earlier = list_checkpoints(final.parent)
    kept = (f"the previous checkpoint {earlier[-1].name} is intact; {fix} and continue with "
            "--resume" if earlier else f"no earlier checkpoint was saved; {fix} and start again")
    return f"{reason} while saving checkpoint {final.name} in {final.parent}; {kept}"


def load_resume_checkpoint(path: Path, model: nn.Module) -> dict:
    """`load_checkpoint` for --resume, which always takes the newest checkpoint: a damaged
    one names the checkpoint before it and how to resume from that one instead."""
    try:
        return load_checkpoint(path, model)
    except DamagedCheckpoint as damaged:
        earlier = previous_checkpoint(path)
        if earlier is None:
            raise
        raise CheckpointError(f"{damaged.problem}; to resume from the previous checkpoint "
                              f"{earlier.name}, move {path.name} out of {path.parent}") from None


def load_optimizer_shard(path: Path, env: Env) -> dict:
    """This rank's optimizer state from an FSDP2 checkpoint written by as many ranks."""
    shards = sorted(path.glob("optimizer-rank-*.pt"))
    if not shards:
        raise CheckpointError(f"checkpoint {path} was written without FSDP; resume it without "
                              "--distributed fsdp")
    if len(shards) != env.world_size:
        raise CheckpointError(f"checkpoint {path} holds optimizer state for {len(shards)} "
                              f"FSDP ranks; resume it with --nproc-per-node {len(shards)}")
    return read_state(path, optimizer_shard_name(env.rank))


def prune_checkpoints(directory: Path, keep_last: int, keep: set[Path] = frozenset()) -> None:
    """Delete all but the newest `keep_last` complete checkpoints and those in `keep`."""
    complete = list_checkpoints(directory)
    for path in complete[: max(0, len(complete) - keep_last)]:
        if path not in keep:
            shutil.rmtree(path)


def restore_loop_state(saved: dict, checkpoint: Path, model: nn.Module, optimizer,
                       env: Env) -> LoopState:
    """Optimizer and loop state from a checkpoint whose weights are loaded."""
    if is_sharded(model):
        load_local_optimizer_state(optimizer, load_optimizer_shard(checkpoint, env))
    elif "optimizer" in saved:
        optimizer.load_state_dict(saved["optimizer"])
    else:
        raise CheckpointError(f"{checkpoint} was written by an FSDP run; resume it with "
                            "--distributed fsdp under torchrun with as many processes")
    return LoopState(**saved["loop"])
