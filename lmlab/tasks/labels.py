"""The labels a task's training examples hold, in a stable order, and the check that evaluation
examples hold none that training never saw (the model has no output for it)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from lmlab.data.errors import DataError
from lmlab.tasks.readers import TaggedSentence, TextExample

INTEGER = re.compile(r"-?\d+")
SHOWN_LABELS = 12  # training labels an error lists; more mean a wrong column, not a typo


def label_names(labels: Iterable[str]) -> list[str]:
    """Unique labels in a stable natural order: numerically when all are integers ("2" < "10")."""
    names = set(labels)
    if all(INTEGER.fullmatch(name) for name in names):
        return sorted(names, key=lambda name: (int(name), name))
    return sorted(names)


def class_names(examples: Sequence[TextExample], path: str | Path,
                where: str | None = None) -> list[str]:
    """The labels of a classification's training examples. One label alone is refused: the
    model would learn to always answer it and score a perfect accuracy on data like it."""
    names = label_names(example.label for example in examples)
    if len(names) == 1:
        rows = f"all {len(examples)} training rows" + (f" with {where}" if where else "")
        raise DataError(f"{rows} have the label {names[0]!r}; a classifier needs at least two "
                        "labels (is --label-column the right column?)", path)
    return names


def _check_known(found: Iterable[tuple[str, int]], known: Sequence[str], kind: str,
                 path: str | Path) -> None:
    """Fail at the first value training never saw: the model has no output for it."""
    allowed = set(known)
    shown = ", ".join(known[:SHOWN_LABELS]) + (
        f" … ({len(known)} in all: is --label-column the right column?)"
        if len(known) > SHOWN_LABELS else "")
    for value, line in found:
        if value not in allowed:
            raise DataError(f"{kind} {value!r} never seen in training (training {kind}s: "
                            f"{shown})", path, line)


def check_labels_known(examples: Sequence[TextExample], known: Sequence[str],
                       path: str | Path) -> None:
    """Evaluation labels must be training labels (regression and unlabelled rows pass)."""
    labels = ((e.label, e.line) for e in examples if isinstance(e.label, str))
    _check_known(labels, known, "label", path)


def check_tags_known(sentences: Sequence[TaggedSentence], known: Sequence[str],
                     path: str | Path) -> None:
    """Evaluation tags must be training tags; the error names the tag's own line."""
    tags = ((tag, s.line + i) for s in sentences for i, tag in enumerate(s.tags))
    _check_known(tags, known, "tag", path)
