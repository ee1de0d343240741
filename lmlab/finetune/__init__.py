"""Fine-tuning a run on a labelled task: classify, pairs, regress, qa, ner.

`finetune(...)` (also `lmlab.fine_tune(...)`) fine-tunes as `lmlab finetune` does."""

from __future__ import annotations

from pathlib import Path

from lmlab.config.parsing import resolve_config
from lmlab.tasks.finetune_config import FinetuneConfig


def finetune(run: str | Path, config: str | Path | None = None, **fields) -> Path:
    """Fine-tune the run at `run` as `lmlab finetune` does, from a config file and/or its
    fields by name, e.g. `lmlab.fine_tune("runs/mlm", task="classify", train="train.tsv",
    validation="dev.tsv")`. Returns the fine-tuned run directory."""
    from lmlab.finetune.entry import finetune as finetune_run  # the trainer: loaded when used

    cfg = resolve_config(Path(config) if config is not None else None, fields, FinetuneConfig)
    return finetune_run(run, cfg)

