"""A dataset directory's life: built under a temporary name and renamed when complete, so an
interrupted run never leaves one that looks finished; re-running the same recipe on the same
inputs reuses it, anything else in the way is refused, and two processes asking for the same
directory at once build it once."""

from __future__ import annotations

import glob
import json
import os
import platform
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import tokenizers

from lmlab.atomic import failed_writes_named, make_directory, staging_directory
from lmlab.cache import only_one_process
from lmlab.data.errors import DataError
from lmlab.data.preparation.recipe import Recipe
from lmlab.data.preparation.stats import format_report
from lmlab.version import __version__

FORMAT_VERSION = 2  # 2: sentence offsets, recipe record, statistics


def is_complete(directory: Path) -> bool:
    return (Path(directory) / "meta.json").is_file()


def make_dataset(out: Path, recipe: Recipe, inputs: list[dict],
                 build: Callable[[Path], dict]) -> Path:
    """The dataset `out`: reused when complete and made from the same recipe and inputs, else
    built by `build(work)` (which writes its files into `work` and returns the rest of
    meta.json) and put in place."""
    make_directory(out.parent)
    # two runs started together on the built-in corpus: one prepares it, the other waits
    with only_one_process(out, f"waiting for another process preparing {out}"):
        if is_complete(out):  # made meanwhile by another process, or asked again
            _check_reusable(out, recipe, inputs)
            return out
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise DataError(f"{out} holds something that is not an lmlab dataset; choose "
                            "another --out or empty it")
        _remove_abandoned(out)
        return _build_into(out, recipe, inputs, build)


def _build_into(out: Path, recipe: Recipe, inputs: list[dict],
                build: Callable[[Path], dict]) -> Path:
    work = staging_directory(out, prefix=f"{_partial_prefix(out)}{os.getpid()}-")
    with failed_writes_named(out):
        try:
            built = build(work)
            meta = {"format": FORMAT_VERSION, "versions": _versions(),
                    "recipe": recipe.to_dict(), "inputs": inputs, **built}
            (work / "stats.txt").write_text(format_report(meta), encoding="utf-8")
            (work / "meta.json").write_text(json.dumps(meta, indent=2))  # last: complete
            if out.exists():
                out.rmdir()  # empty, checked above
            os.replace(work, out)
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
    return out


def _partial_prefix(out: Path) -> str:
    return f".{out.name}.partial-"


def _remove_abandoned(out: Path) -> None:
    """Remove the work directories of earlier runs for `out` whose process is gone (killed
    before it could clean up); those of running processes, this one's for other outputs
    included, are left alone."""
    prefix = _partial_prefix(out)
    for work in out.parent.glob(f"{glob.escape(prefix)}*"):
        owner = work.name.removeprefix(prefix).split("-")[0]
        if owner.isdigit() and not _is_running(int(owner)):
            shutil.rmtree(work, ignore_errors=True)


def _is_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _check_reusable(out: Path, recipe: Recipe, inputs: list[dict]) -> None:
    meta = json.loads((out / "meta.json").read_text())
    if meta.get("recipe") != recipe.to_dict():
        raise DataError(f"{out} holds a dataset prepared with another recipe; choose another "
                        "--out or delete it")
    if meta.get("inputs") != inputs:
        raise DataError(f"{out} was prepared from other versions of the input files; choose "
                        "another --out or delete it")


def _versions() -> dict:
    return {"lmlab": __version__, "tokenizers": tokenizers.__version__,
            "numpy": np.__version__, "python": platform.python_version()}
