"""The run directory: what a run leaves behind, and the rules for reusing one.

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
import shutil
from dataclasses import replace
from pathlib import Path

from lmlab.atomic import atomic_write, make_directory
from lmlab.runs.checkpoints import list_checkpoints, read_manifest, remove_unfinished
from lmlab.runs.schema import RunConfig, RunConfigError, read_run_config, write_run_config

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


def prepare_run_dir(out: Path, config: RunConfig, resume: bool, overwrite: bool,
                    tokenizer_json: str | None = None) -> Path | None:
    """Make `out` ready, with `config` and the run's tokenizer (if it has one) written;
    returns the checkpoint to resume from, if any.

    A directory holding another run needs --resume or --overwrite; one holding unrelated
    files is never touched. A run whose saved configuration equals this one is resumed.
    """
    saved = out / CONFIG
    if out.exists() and not out.is_dir():
        raise RunDirError(f"{out} exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not saved.is_file():
        raise RunDirError(f"{out} holds files that are not an lmlab run; choose another --out")
    if saved.is_file() and overwrite:
        shutil.rmtree(out)
    elif saved.is_file():
        previous = _saved_config(saved)
        if not (resume or _comparable(previous) == _comparable(config)):
            raise RunDirError(f"{out} holds another run; pass --resume to continue it or "
                              "--overwrite to replace it")
        _check_same_model(out, previous.model.to_dict(), config.model.to_dict())
        _check_same_tokenizer(out, previous.tokenizer_sha256, tokenizer_json)
    made = not out.exists()
    make_directory(out)
    try:
        if tokenizer_json:
            config = replace(config, tokenizer_sha256=write_tokenizer(out, tokenizer_json))
        write_run_config(saved, config)
    except BaseException:
        if not saved.is_file():  # a tokenizer without a config: no run, refused next time
            (out / TOKENIZER).unlink(missing_ok=True)
            if made:
                out.rmdir()
        raise
    remove_unfinished(out / CHECKPOINTS)  # a killed or failed save's, before a full disk refills
    checkpoints = list_checkpoints(out / CHECKPOINTS)
    return checkpoints[-1] if checkpoints else None


def _saved_config(path: Path) -> RunConfig:
    try:
        return read_run_config(path)
    except RunConfigError as error:
        raise RunDirError(f"{path}: {error}; pass --overwrite to replace the run, or choose "
                          "another --out") from None


def write_tokenizer(run: Path, tokenizer_json: str) -> str:
    """Write `run`'s tokenizer.json; returns its SHA-256, for config.json to record."""
    data = tokenizer_json.encode()
    with atomic_write(run / TOKENIZER, "wb") as file:
        file.write(data)
    return hashlib.sha256(data).hexdigest()


def _check_same_tokenizer(out: Path, recorded: str | None, tokenizer_json: str | None) -> None:
    """A run continues with the tokenizer it was trained with: another one, even of the same
    size, would change what every token id means."""
    if not (recorded and tokenizer_json):
        return
    if hashlib.sha256(tokenizer_json.encode()).hexdigest() != recorded:
        raise RunDirError(f"{out} was trained with another tokenizer (its SHA-256 differs from "
                          "the one recorded in config.json); continue it on the dataset it was "
                          "trained on, or choose another --out")


def _check_same_model(out: Path, saved: dict, wanted: dict) -> None:
    """A run resumes only into the model it saved: a different vocabulary means a dataset
    prepared with another tokenizer."""
    differing = sorted(k for k in saved.keys() | wanted.keys() if saved.get(k) != wanted.get(k))
    if not differing:
        return
    details = ", ".join(f"{k} {saved.get(k)} → {wanted.get(k)}" for k in differing[:4])
    hint = (" (the dataset was prepared with another tokenizer)"
            if "vocab_size" in differing else "")
    raise RunDirError(f"{out} was trained with another model configuration ({details}){hint}; "
                      "resume it with its own settings and dataset, or use another --out")


def _comparable(config: RunConfig) -> RunConfig:
    """The configuration without the flags that only say how to treat the directory and the
    record of what was written there."""
    train = {k: v for k, v in config.train.items() if k not in ("resume", "overwrite")}
    return replace(config, train=train, tokenizer_sha256=None)


def trained_steps(out: Path) -> int:
    """The steps the run in `out` has trained, by its newest checkpoint (0 with none)."""
    checkpoints = list_checkpoints(out / CHECKPOINTS)
    return read_manifest(checkpoints[-1])["step"] if checkpoints else 0
