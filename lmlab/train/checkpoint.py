"""Checkpoints that are atomic and verifiable.

A checkpoint is a directory `step-00001234/` holding `model.safetensors` (whole weights, however
the run was sharded), `state.pt` (optimizer, loop and data position: tensors and plain values
only, loaded with weights_only=True), under FSDP2 one `optimizer-rank-N.pt` per rank instead of
the optimizer in `state.pt`, and `manifest.json` with the SHA-256 of each file. It is written
under a temporary name and renamed into place, so a crash never leaves a directory that looks
complete; a checksum mismatch on load names the file and the previous good checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_model, save_file
from torch import Tensor, nn

from lmlab.train.distributed import Env, barrier, full_weights

MANIFEST = "manifest.json"
PREFIX = "step-"


class CheckpointError(RuntimeError):
    """A checkpoint that is missing, incomplete or corrupt, stated in one line."""


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def checkpoint_name(step: int) -> str:
    return f"{PREFIX}{step:08d}"


def list_checkpoints(directory: Path) -> list[Path]:
    """Complete checkpoints (those with a manifest), oldest first."""
    if not directory.is_dir():
        return []
    found = [p for p in directory.iterdir()
             if p.name.startswith(PREFIX) and (p / MANIFEST).is_file()]
    return sorted(found, key=lambda p: p.name)


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


def verify_checkpoint(path: Path) -> dict:
    """The manifest, after checking every file against its checksum."""
    manifest_path = path / MANIFEST
    if not manifest_path.is_file():
        raise CheckpointError(f"{path} is not a complete checkpoint (no {MANIFEST})")
    manifest = json.loads(manifest_path.read_text())
    for name, expected in manifest["files"].items():
        file = path / name
        if not file.is_file() or sha256_of(file) != expected:
            earlier = [p for p in list_checkpoints(path.parent) if p.name < path.name]
            hint = f"; the previous checkpoint is {earlier[-1]}" if earlier else ""
            raise CheckpointError(f"checkpoint file {file} is missing or corrupt "
                                  f"(checksum mismatch){hint}")
    return manifest


def load_checkpoint(path: Path, model: nn.Module) -> dict:
    """Verify, load the weights into `model` (tied weights included) and return the state."""
    verify_checkpoint(path)
    missing, unexpected = load_model(model, str(path / "model.safetensors"), strict=False)
    if missing or unexpected:
        raise CheckpointError(f"checkpoint {path} does not fit this model: missing "
                              f"{sorted(missing)[:5]}, unexpected {sorted(unexpected)[:5]}")
    return torch.load(path / "state.pt", weights_only=True)


def load_optimizer_shard(path: Path, env: Env) -> dict:
    """This rank's optimizer state from an FSDP2 checkpoint written by as many ranks."""
    shards = sorted(path.glob("optimizer-rank-*.pt"))
    if not shards:
        raise CheckpointError(f"checkpoint {path} was written without FSDP; resume it without "
                              "--distributed fsdp")
    if len(shards) != env.world_size:
        raise CheckpointError(f"checkpoint {path} holds optimizer state for {len(shards)} "
                              f"FSDP ranks; resume it with --nproc-per-node {len(shards)}")
    return torch.load(path / optimizer_shard_name(env.rank), weights_only=True)


def prune_checkpoints(directory: Path, keep_last: int, keep: set[Path] = frozenset()) -> None:
    """Delete all but the newest `keep_last` complete checkpoints and those in `keep`."""
    complete = list_checkpoints(directory)
    for path in complete[: max(0, len(complete) - keep_last)]:
        if path not in keep:
            shutil.rmtree(path)
