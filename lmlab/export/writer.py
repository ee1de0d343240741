"""`lmlab export RUN --out DIR [--format hf|sentence-transformers|gguf]`: a run in a format
other tools load, one module per format (`FORMATS`), each saying what it writes.

Every format is staged beside DIR, checked where it can be (loaded back by the tool it is
for, its outputs compared with the run's), and renamed into place, so a failed or refused
export leaves nothing half-written behind. `DIR/lmlab-export.json` records where it came
from and the check's result.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from lmlab.atomic import atomic_directory, check_replaceable
from lmlab.export.formats import FORMATS
from lmlab.export.hf_files import EXPORT_RECORD
from lmlab.export.targets import ExportError, Target
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
    are the format's own (sentence-transformers: pooling, normalize; gguf: dtype)."""
    if format not in FORMATS:
        raise ExportError(f"unknown format {format!r}; choose from {', '.join(FORMATS)}")
    out, writer = Path(out), FORMATS[format]
    foreign = sorted(set(options) - set(writer.options))
    if foreign:
        raise ExportError(f"{', '.join(foreign)} do not apply to the {format} format")
    target = writer.target(run, **options)  # refusals come before anything is written
    check_replaceable(out, (out / EXPORT_RECORD).is_file(), "an lmlab export")
    with atomic_directory(out) as staging:
        difference = writer.write(run, target, staging, check)
        if difference is not None and not difference <= writer.tolerance:  # NaN fails too
            raise ExportError(f"the exported model's outputs differ from the run's by "
                              f"{difference:.2e} (more than {writer.tolerance:g}); nothing "
                              "was written")
        record = {"run": str(run.path), "checkpoint": str(run.checkpoint), "objective": run.spec,
                  "format": format, "architecture": target.architecture,
                  "max_difference": difference}
        (staging / EXPORT_RECORD).write_text(json.dumps(record, indent=2) + "\n")
    return Exported(out, target, difference, format)
