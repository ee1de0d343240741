"""Minimal pairs in BLiMP's format: does the model score each grammatical sentence above its
ungrammatical twin?

Each row (a JSONL line, as in BLiMP; any format lmlab/data/text/readers.py reads) holds
`sentence_good` and `sentence_bad`. Accuracy is the share of pairs whose
good sentence scores strictly higher: equal scores count as wrong, so a model (or a scoring
rule) that cannot tell the two apart gets no credit for the pair. Results are grouped by file
and, where lines carry them, by `field` and by `UID` (UID only where it is not just the file
name again); `group_by` asks for other keys ("file" is the file name), which every line must
then have.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lmlab.data.errors import DataError
from lmlab.data.text.readers import ReadOptions, Record, file_format, read_rows

SENTENCES = ("sentence_good", "sentence_bad")
DEFAULT_GROUPS = ("file", "field", "UID")


@dataclass(frozen=True)
class MinimalPair:
    good: str
    bad: str
    groups: dict[str, str]  # grouping key → this pair's value


def minimal_pair_files(paths: Sequence[str | Path]) -> list[Path]:
    """Files as given; a directory stands for its JSON-lines files (.jsonl, maybe compressed),
    sorted."""
    files = []
    for path in map(Path, paths):
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.is_file() and file_format(p) == ".jsonl")
            if not found:
                raise DataError(f"{path}: no .jsonl files in this directory")
            files += found
        elif path.is_file():
            files.append(path)
        else:
            raise DataError(f"{path}: no such file or directory")
    return files


def _minimal_pair(row: Record, path: Path, keys: Sequence[str], required: bool) -> MinimalPair:
    fields, line = row.fields, row.line
    for name in SENTENCES:
        if name not in fields:
            raise DataError(f"missing {name!r}", path, line)
        if not isinstance(fields[name], str) or not fields[name].strip():
            raise DataError(f"{name!r} must be a non-empty string", path, line)
    groups = {}
    for key in keys:
        if key == "file":
            groups[key] = Path(path.name.removesuffix(".gz").removesuffix(".zst")).stem
        elif key in fields:
            groups[key] = str(fields[key])
        elif required:
            raise DataError(f"no {key!r} to group by", path, line)
    return MinimalPair(fields["sentence_good"], fields["sentence_bad"], groups)


def _row_format(path: Path) -> str:
    """The suffix's row format; a file named otherwise (.txt too) is read as JSON lines."""
    found = file_format(path)
    return found if found not in (None, ".txt") else ".jsonl"


def read_minimal_pairs(paths: Sequence[str | Path],
                       group_by: Sequence[str] | None = None) -> list[MinimalPair]:
    keys = list(group_by) if group_by else list(DEFAULT_GROUPS)
    pairs = []
    for path in minimal_pair_files(paths):
        before = len(pairs)
        rows = read_rows(path, ReadOptions(strict=True), as_format=_row_format(path))
        pairs += (_minimal_pair(row, path, keys, required=bool(group_by)) for row in rows)
        if len(pairs) == before:
            raise DataError("no minimal pairs in this file", path)
    if not group_by and all(p.groups.get("UID") == p.groups["file"] for p in pairs):
        for pair in pairs:
            pair.groups.pop("UID", None)
    return pairs


def _stats(correct: np.ndarray, ties: np.ndarray) -> dict:
    return {"pairs": len(correct), "correct": int(correct.sum()), "ties": int(ties.sum()),
            "accuracy": float(correct.mean()) if len(correct) else 0.0}


def minimal_pair_accuracy(pairs: Sequence[MinimalPair],
                          score: Callable[[list[str]], np.ndarray]) -> dict:
    """Accuracy overall and per group; `score` maps sentences to log-likelihoods."""
    sentences = list(dict.fromkeys(s for p in pairs for s in (p.good, p.bad)))
    by_sentence = dict(zip(sentences, np.asarray(score(sentences), dtype=float), strict=True))
    good = np.array([by_sentence[p.good] for p in pairs])
    bad = np.array([by_sentence[p.bad] for p in pairs])
    correct, ties = good > bad, good == bad
    groups: dict[str, dict[str, dict]] = {}
    for key in dict.fromkeys(k for p in pairs for k in p.groups):
        values = np.array([p.groups.get(key) for p in pairs], dtype=object)
        groups[key] = {value: _stats(correct[values == value], ties[values == value])
                       for value in sorted(v for v in set(values) if v is not None)}
    return {**_stats(correct, ties), "groups": groups}
