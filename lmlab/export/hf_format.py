"""The Hugging Face format: a directory transformers loads with its Auto classes and
pipelines (lmlab.export.hf_directory), checked by loading it back (lmlab.export.check)."""

from __future__ import annotations

from pathlib import Path

from lmlab.export.check import max_difference
from lmlab.export.hf_directory import write_hf_directory
from lmlab.export.targets import Format, Target, export_target
from lmlab.runs import Run


def transformers_installed() -> bool:
    try:
        import transformers  # noqa: F401
    except ImportError:
        return False
    return True


def write(run: Run, target: Target, staging: Path, check: bool) -> float | None:
    # A fine-tuned run reads rows as lmlab's encoder frames them, whatever its attention.
    fine_tuned = run.task is not None
    write_hf_directory(run, target, staging, framed=not target.causal or fine_tuned,
                       pair_framed=fine_tuned or run.objective.framing == "pair")
    if not (check and transformers_installed()):
        return None
    return max_difference(run, target, staging)


# fp32 on CPU agrees to about 1e-6; more means a wrong mapping.
HF = Format(export_target, write, tolerance=1e-4)
