"""`lmlab export RUN --out DIR [--format hf|sentence-transformers|gguf]`: a run in a format
other tools load, one module per format (`FORMATS`), each saying what it writes.

Every format is staged beside DIR, checked where it can be (loaded back by the tool it is
for, its outputs compared with the run's), and renamed into place, so a failed or refused
export leaves nothing half-written behind. `DIR/lmlab-export.json` records where it came
from and the check's result. A one-file format (GGUF) may be written as the file itself,
`--out NAME.gguf`, with no record beside it: the file's own metadata names the run.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from lmlab.atomic import (
    atomic_directory,
    check_replaceable,
    failed_writes_named,
    make_directory,
    staging_directory,
)
from lmlab.export.formats import FORMATS
from lmlab.export.hf_files import EXPORT_RECORD
from lmlab.export.targets import ExportError, Format, Target
from lmlab.runs import Run


@dataclass
class Exported:
    out: Path
    target: Target
    max_difference: float | None  # None: not checked (--no-check, or no transformers)
    format: str = "hf"


def export_run(run: Run, out: str | Path, check: bool = True, format: str = "hf",
               **options) -> Exported:
    """Write `run` (loaded with lmlab.runs.load_run) to `out` in `format`; with `check`, load
    it back with the tool the format is for (when installed) and compare outputs. `options`
    are the format's own (sentence-transformers: pooling, normalize; gguf: dtype). A format
    that writes one file writes it as `out` when `out` ends with that file's suffix."""
    if format not in FORMATS:
        raise ExportError(f"unknown format {format!r}; choose from {', '.join(FORMATS)}")
    out, writer = Path(out), FORMATS[format]
    foreign = sorted(set(options) - set(writer.options))
    if foreign:
        raise ExportError("; ".join(_not_taken(name, format) for name in foreign))
    target = writer.target(run, **options)  # refusals come before anything is written
    if writer.file is not None and out.suffix == Path(writer.file).suffix:
        return Exported(out, target, _write_file(run, target, writer, out, check), format)
    check_replaceable(out, (out / EXPORT_RECORD).is_file(), "an lmlab export")
    with atomic_directory(out) as staging:
        difference = _checked_write(run, target, writer, staging, check)
        record = {"run": str(run.path), "checkpoint": str(run.checkpoint), "objective": run.spec,
                  "format": format, "architecture": target.architecture,
                  "max_difference": difference}
        (staging / EXPORT_RECORD).write_text(json.dumps(record, indent=2) + "\n")
    return Exported(out, target, difference, format)


def _not_taken(option: str, format: str) -> str:
    """Why `option` is refused with `format`, and which formats take it."""
    takers = " or ".join(name for name, writer in FORMATS.items() if option in writer.options)
    if not takers:
        return f"{option!r} is no option of any export format"
    return (f"--{option} applies only to --format {takers}, not {format}: leave it out, or "
            f"export with --format {takers}")


def _checked_write(run: Run, target: Target, writer: Format, staging: Path,
                   check: bool) -> float | None:
    difference = writer.write(run, target, staging, check)
    if difference is not None and not difference <= writer.tolerance:  # NaN fails too
        raise ExportError(f"the exported model's outputs differ from the run's by "
                          f"{difference:.2e} (more than {writer.tolerance:g}); nothing was "
                          "written")
    return difference


def _write_file(run: Run, target: Target, writer: Format, out: Path,
                check: bool) -> float | None:
    """The format's one file written, checked and renamed to `out` (what a link there points
    to); a file already there is replaced only when lmlab wrote it."""
    out = out.resolve()
    if out.is_dir():
        raise ExportError(f"{out} is a directory; give a new file name, or a directory to "
                          f"write {writer.file} in")
    if out.exists() and not writer.ours(out):
        raise ExportError(f"{out} exists and is not a file lmlab exported; choose another --out")
    make_directory(out.parent)
    staging = staging_directory(out)
    with failed_writes_named(out):
        try:
            difference = _checked_write(run, target, writer, staging, check)
            os.replace(staging / writer.file, out)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return difference
