"""The run directory: what a run leaves behind (opening one for a command: opening.py).

    RUN/config.json         the resolved training and model configuration, and the SHA-256
                            of tokenizer.json (so a tokenizer swapped in is refused)
    RUN/tokenizer.json      the dataset's tokenizer, so the run is usable on its own
    RUN/checkpoints/        step-XXXXXXXX/ (see checkpoints.py)
    RUN/metrics.jsonl       one record per logged step and evaluation
    RUN/curves.png          training and validation curves
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from lmlab.atomic import atomic_write
from lmlab.runs.checkpoints import list_checkpoints, read_manifest

CONFIG = "config.json"
TOKENIZER = "tokenizer.json"
CHECKPOINTS = "checkpoints"
METRICS = "metrics.jsonl"
CURVES = "curves.png"


class RunDirError(ValueError):
    """A run directory that cannot be used as asked, stated in one line."""


def seen_from_run(out: Path, path: str | Path) -> str:
    """`path` relative to the run directory `out`, as config.json records what a run was made
    from (its data, its source): a run moved together with them still names them rightly, and
    the record says nothing of the machine's folders."""
    return os.path.relpath(Path(path).resolve(), Path(out).resolve())


def split_init(text: str) -> tuple[Path, str]:
    """`RUN` or `RUN:CHECKPOINT` (best, last or a checkpoint's name) → (run, checkpoint)."""
    if ":" not in text or Path(text).is_dir():
        return Path(text), "best"
    run, _, checkpoint = text.rpartition(":")
    return Path(run), checkpoint or "best"


def write_tokenizer(run: Path, tokenizer_json: str) -> str:
    """Write `run`'s tokenizer.json; returns its SHA-256, for config.json to record."""
    data = tokenizer_json.encode()
    with atomic_write(run / TOKENIZER, "wb") as file:
        file.write(data)
    return hashlib.sha256(data).hexdigest()


def trained_steps(out: Path) -> int:
    """The steps the run in `out` has trained, by its newest checkpoint (0 with none)."""
    checkpoints = list_checkpoints(out / CHECKPOINTS)
    return read_manifest(checkpoints[-1])["step"] if checkpoints else 0
