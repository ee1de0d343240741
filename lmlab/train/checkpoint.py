"""Writing checkpoints atomically, FSDP2 optimizer shards, and pruning old ones (the format
and its verified reading: lmlab/runs/checkpoints.py).

A checkpoint is written under a temporary name and renamed into place, so a crash never
leaves a directory that looks complete.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch import Tensor, nn

from lmlab.runs.checkpoints import (
    MANIFEST,
    CheckpointError,
    checkpoint_name,
    list_checkpoints,
    read_state,
    sha256_of,
)
from lmlab.train.distributed import Env, barrier, full_weights


def optimizer_shard_name(rank: int) -> str:
    return f"optimizer-rank-{rank}.pt"


def save_checkpoint(directory: Path, step: int, weights: nn.Module | dict[str, Tensor],
                    state: dict, metadata: dict | None = None, shard: dict | None = None,
                    env: Env | None = None) -> Path:
    """Write weights and `state` as checkpoint `step`; returns its path.

    `weights` is a model or its `full_weights`. With `shard` (this rank's optimizer state
    under FSDP2) every rank of `env` must call this; rank 0 writes the rest and publishes.
    """
    main = env is None or env.is_main
    final = directory / checkpoint_name(step)
    temporary = directory / f".tmp-{final.name}"
    if main:
        directory.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(temporary, ignore_errors=True)
        temporary.mkdir()
    if shard is not None:
        barrier(env)
        _write_durably(temporary / optimizer_shard_name(env.rank),
                       lambda path: torch.save(shard, path))
        barrier(env)
    if main:
        tensors = full_weights(weights) if isinstance(weights, nn.Module) else weights
        _write_durably(temporary / "model.safetensors",
                       lambda path: save_file(tensors, str(path)))
        _write_durably(temporary / "state.pt", lambda path: torch.save(state, path))
        files = {p.name: sha256_of(p) for p in sorted(temporary.iterdir())}
        manifest = {"step": step, "files": files, **(metadata or {})}
        _write_durably(temporary / MANIFEST,
                       lambda path: path.write_text(json.dumps(manifest, indent=2)))
        if final.exists():
            shutil.rmtree(final)
        os.replace(temporary, final)  # the bytes are durable before the rename publishes them
    if shard is not None:
        barrier(env)
    return final


def _write_durably(path: Path, write) -> None:
    write(path)
    with open(path, "rb") as f:
        os.fsync(f.fileno())


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
