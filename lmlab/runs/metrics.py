"""Reading a run's metrics.jsonl: one record per line, appended while the run trains.

A line is whole once its newline is written. The last line may not be (training is writing it
now): it is left for the next read. A whole line that does not parse (cut short by a crash,
then followed by a resumed run's records) is skipped.
"""

from __future__ import annotations

import json
from pathlib import Path

from lmlab.runs.layout import METRICS

# Before a validation metric's name: measured on general text, not the run's own (what a
# continued run forgets; lmlab.data.general_text).
GENERAL_TEXT = "general/"


def metrics_rows(run_dir: str | Path, after: int = 0) -> tuple[list[dict], int]:
    """The records of `run_dir`'s metrics.jsonl from whole line `after` on, and the number of
    whole lines read (where the next read starts). A missing file has none."""
    path = Path(run_dir) / METRICS
    if not path.is_file():
        return [], after
    *whole, _being_written = path.read_text(encoding="utf-8").split("\n")
    records = []
    for line in whole[after:]:
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records, max(after, len(whole))


def read_metrics(run_dir: str | Path) -> list[dict]:
    """Every whole record of `run_dir`'s metrics.jsonl, in order."""
    return metrics_rows(run_dir)[0]


# What each validation loss term measures, in words.
LOSS_WORDS = {"mlm": "masked tokens", "clm": "next token", "prefix": "next token after a prefix",
              "span": "corrupted spans", "nsp": "next-sentence prediction"}


def loss_name(key: str) -> str:
    """'mlm/mlm_loss' → 'validation loss (masked tokens)', 'general/mlm/mlm_loss' → 'general-text
    loss (masked tokens)'; a key it does not know, as it is."""
    general = key.startswith(GENERAL_TEXT)
    objective, _, term = key.removeprefix(GENERAL_TEXT).removesuffix("_loss").rpartition("/")
    if term not in LOSS_WORDS:
        return f"validation {key}"
    of = "" if objective in ("", term) else f", {objective}"
    return f"{'general-text' if general else 'validation'} loss ({LOSS_WORDS[term]}{of})"
