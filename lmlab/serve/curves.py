"""The lines the page draws from a run's metrics.jsonl rows, named and pointed here so the page
only draws them: the training loss, the validation line and the learning rate.

Pre-training validates a loss; fine-tuning validates the task's scores and no loss (its eval
rows hold accuracy, F1, ...), so a fine-tuned run's validation line is its task's main metric,
on its own scale. The rows are those one poll returns: the page adds each line's points to
those it holds.
"""

from __future__ import annotations

import math


def curves(rows: list[dict], main_metric: str | None) -> list[dict]:
    """[{"name", "points": [[step, value], ...], "own": on its own scale}] for `rows`;
    `main_metric` is a fine-tuned run's (None for pre-training)."""
    train = [row for row in rows if row.get("kind") == "train"]
    evals = [row for row in rows if row.get("kind") == "eval"]
    if main_metric is None:
        validation = _line("validation loss", [(row["step"], _first_loss(row)) for row in evals])
    else:
        validation = _line(f"validation {main_metric}",
                           [(row["step"], row.get(main_metric)) for row in evals], own=True)
    return [_line("train loss", [(row["step"], row.get("loss")) for row in train]),
            validation,
            _line("learning rate", [(row["step"], row.get("lr")) for row in train], own=True)]


def _first_loss(row: dict) -> float | None:
    """The first loss of an eval row (mlm/mlm_loss, ...): a mixture's first objective's."""
    return next((value for key, value in row.items() if key.endswith("_loss")), None)


def _line(name: str, points: list[tuple[int, object]], own: bool = False) -> dict:
    """A line of the points that have a finite value: a row without one draws nothing."""
    kept = [[step, value] for step, value in points
            if isinstance(value, int | float) and math.isfinite(value)]
    return {"name": name, "points": kept, "own": own}
