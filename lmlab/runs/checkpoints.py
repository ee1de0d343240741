"""Checkpoints as a run directory holds them, and their verified reading.

A checkpoint is a directory `step-00001234/` holding `model.safetensors` (whole weights, however
the run was sharded), `state.pt` (optimizer, loop and data position: tensors and plain values
only, loaded with weights_only=True), under FSDP2 one `optimizer-rank-N.pt` per rank instead of
the optimizer in `state.pt`, and `manifest.json` with the SHA-256 of each file. Readers verify
every file against the manifest before using it; a mismatch names the file and the previous
good checkpoint. Writing is training's job (lmlab/train/checkpoint.py).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch
from safetensors.torch import load_model
from torch import nn

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
    return read_state(path)


def read_state(path: Path, name: str = "state.pt") -> dict:
    """A checkpoint's state file: tensors and plain values only, never arbitrary pickles."""
    return torch.load(path / name, weights_only=True, map_location="cpu")
