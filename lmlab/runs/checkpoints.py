"""Checkpoints as a run directory holds them, and their verified reading.

A checkpoint is a directory `step-00001234/` holding `model.safetensors` (whole weights, however
the run was sharded), `state.pt` (optimizer, loop and data position: tensors and plain values
only, loaded with weights_only=True), under FSDP2 one `optimizer-rank-N.pt` per rank instead of
the optimizer in `state.pt`, and `manifest.json` with the SHA-256 of each file (and, from
training, the run's best checkpoint so far and whether the run ended there, so finding either
reads no state). Readers verify every file against the manifest before using it; a mismatch
names the file and the previous good checkpoint. `publish_checkpoint` writes one; training adds
FSDP2 shards and pruning (lmlab/train/checkpoint.py).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save
from torch import Tensor, nn

from lmlab.atomic import sha256_of
from lmlab.runs.old_names import current_weights

MANIFEST = "manifest.json"
WEIGHTS = "model.safetensors"
PREFIX = "step-"
BEST = "best_checkpoint"  # the manifest's record of the run's best checkpoint when it was saved
FINISHED = "finished"  # the manifest's record that the run ended there (planned steps done)


class CheckpointError(RuntimeError):
    """A checkpoint that is missing, incomplete or corrupt, stated in one line."""


class DamagedCheckpoint(CheckpointError):
    """A file of `checkpoint` that fails its checksum or cannot be read. The message says how
    to load the checkpoint before it; `problem` is the message without that advice, for
    callers whose way out differs (--resume)."""

    def __init__(self, checkpoint: Path, problem: str) -> None:
        self.checkpoint, self.problem = checkpoint, problem
        super().__init__(self.advised("--checkpoint"))

    def __reduce__(self):  # whole across processes (compare's workers and Ray tasks)
        return type(self), (self.checkpoint, self.problem)

    def advised(self, option: str) -> str:
        """The message, advising the previous checkpoint through the command's `option`."""
        earlier = previous_checkpoint(self.checkpoint)
        return self.problem + (f"; load the previous one with {option} {earlier.name}"
                               if earlier else "")


def checkpoint_name(step: int) -> str:
    return f"{PREFIX}{step:08d}"


def list_checkpoints(directory: Path) -> list[Path]:
    """Complete checkpoints (those with a manifest), oldest first."""
    if not directory.is_dir():
        return []
    found = [p for p in directory.iterdir()
             if p.name.startswith(PREFIX) and (p / MANIFEST).is_file()]
    return sorted(found, key=lambda p: p.name)


def previous_checkpoint(path: Path) -> Path | None:
    """The newest complete checkpoint saved before checkpoint `path`."""
    earlier = [p for p in list_checkpoints(path.parent) if p.name < path.name]
    return earlier[-1] if earlier else None


def read_manifest(path: Path) -> dict:
    """Checkpoint `path`'s manifest, as written (nothing verified)."""
    manifest_path = path / MANIFEST
    if not manifest_path.is_file():
        raise CheckpointError(f"{path} is not a complete checkpoint (no {MANIFEST})")
    try:
        return json.loads(manifest_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise DamagedCheckpoint(path, f"{manifest_path} is not a readable checkpoint manifest "
                                      f"({error})") from None


def weights_sha256(path: Path) -> str:
    """The SHA-256 checkpoint `path`'s manifest records for its weights file."""
    return read_manifest(path)["files"][WEIGHTS]


def verify_checkpoint(path: Path) -> dict:
    """The manifest, after checking every file against its checksum."""
    manifest = read_manifest(path)
    for name, expected in manifest["files"].items():
        file = path / name
        if not file.is_file() or sha256_of(file) != expected:
            raise DamagedCheckpoint(path, f"checkpoint file {file} is missing or corrupt "
                                          "(checksum mismatch)")
    return manifest


def load_weights(path: Path, model: nn.Module) -> None:
    """Verify checkpoint `path` and load its weights into `model` (tied weights included)."""
    verify_checkpoint(path)
    file = path / WEIGHTS
    try:  # safetensors reads tensors only: a pickle put there is refused, never run
        tensors = current_weights(load_file(str(file)))
    except SafetensorError as error:
        raise DamagedCheckpoint(path, f"{file} is not a safetensors file ({error})") from None
    if stored_apart(model, set(tensors)):  # a head untied during training (--untie-at)
        model.untie()
    try:
        missing, unexpected = model.load_state_dict(tensors, strict=False)
    except RuntimeError as error:  # torch lists every tensor of another shape, a line each
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        first = next((line for line in lines if line.startswith("size mismatch")), lines[-1])
        raise CheckpointError(f"checkpoint {path} does not fit this model: {first}") from None
    missing = set(missing) - tied_to_loaded(model, set(tensors))
    if missing or unexpected:
        raise CheckpointError(f"checkpoint {path} does not fit this model: missing "
                              f"{sorted(missing)[:5]}, unexpected {sorted(unexpected)[:5]}")


def _names_of_each_parameter(model: nn.Module) -> list[set[str]]:
    """Every name of each of `model`'s parameters: several for a tied one."""
    names_of: dict[int, set[str]] = {}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        names_of.setdefault(id(parameter), set()).add(name)
    return list(names_of.values())


def tied_to_loaded(model: nn.Module, loaded: set[str]) -> set[str]:
    """The names of `model`'s parameters not in `loaded` but tied to one that is: a checkpoint
    stores a tied weight once (`untied`), and loading it sets every name it has."""
    return {name for names in _names_of_each_parameter(model) if names & loaded
            for name in names - loaded}


def stored_apart(model: nn.Module, loaded: set[str]) -> bool:
    """Whether `loaded` holds two names of one of `model`'s tied parameters: weights that
    were untied after the model was configured tied."""
    return any(len(names & loaded) > 1 for names in _names_of_each_parameter(model))


def load_checkpoint(path: Path, model: nn.Module) -> dict:
    """`load_weights`, then the state to continue training from."""
    load_weights(path, model)
    return read_state(path)


def read_state(path: Path, name: str = "state.pt") -> dict:
    """A checkpoint's state file: tensors and plain values only, never arbitrary pickles."""
    file = path / name
    try:
        state = torch.load(file, weights_only=True, map_location="cpu")
    except OSError:
        raise
    except Exception:  # malformed bytes fail the weights-only unpickler in many, cryptic ways
        raise DamagedCheckpoint(path, f"{file} is truncated or not a checkpoint state") from None
    if not isinstance(state, dict):
        raise DamagedCheckpoint(path, f"{file} is not a checkpoint state (it holds a "
                                      f"{type(state).__name__}, not a dict)")
    return state


def untied(weights: dict[str, Tensor], model: nn.Module) -> dict[str, Tensor]:
    """`weights` (the model's state dict) with each tied parameter once, under its first
    name, contiguous: what safetensors stores and `load_checkpoint` restores."""
    seen, tied = set(), set()
    for name, parameter in model.named_parameters(remove_duplicate=False):
        if id(parameter) in seen:
            tied.add(name)
        seen.add(id(parameter))
    return {k: v.contiguous() for k, v in weights.items() if k not in tied}


STAGING = ".tmp-"


def staging_dir(final: Path) -> Path:
    """Where checkpoint `final` is written before `publish_checkpoint` renames it into place,
    so a crash never leaves a directory that looks complete."""
    return final.parent / f"{STAGING}{final.name}"


def remove_unfinished(directory: Path) -> None:
    """Delete the staging directories that failed or killed saves left in `directory`: they
    are never read, but hold space a full disk needs back."""
    for staging in directory.glob(f"{STAGING}{PREFIX}*"):
        shutil.rmtree(staging, ignore_errors=True)


def publish_checkpoint(final: Path, step: int, tensors: dict[str, Tensor], state: dict,
                       metadata: dict | None = None) -> Path:
    """Write the weights, `state` and the manifest into `final`'s staging directory (which may
    already hold other files, e.g. optimizer shards) and rename it to `final`."""
    temporary = staging_dir(final)
    temporary.mkdir(parents=True, exist_ok=True)
    # Through Python file objects, so a failed write surfaces as the OSError behind it.
    write_durably(temporary / WEIGHTS, lambda file: file.write(save(tensors)))
    write_durably(temporary / "state.pt", lambda file: torch.save(state, file))
    files = {p.name: sha256_of(p) for p in sorted(temporary.iterdir())}
    manifest = {"step": step, "files": files, **(metadata or {})}
    write_durably(temporary / MANIFEST,
                  lambda file: file.write(json.dumps(manifest, indent=2).encode()))
    if final.exists():
        shutil.rmtree(final)
    os.replace(temporary, final)  # the bytes are durable before the rename publishes them
    return final


def write_durably(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """`write` the new file `path` through a file object (made as any new file, with the
    user's umask), then make its bytes durable."""
    with open(path, "wb") as file:
        write(file)
        file.flush()
        os.fsync(file.fileno())
