"""The datatrove engine's work folder: what each task counted (`counts/STEP-RANK.json`), the
encoded parts (`parts/RANK`) and the tokenizer, and how the driver merges them into the
dataset and meta.json. A task that is run again rewrites its own files, so counts stay right
when an interrupted prepare resumes."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from lmlab.data.errors import DataError
from lmlab.data.preparation.cleaning import CleaningReport
from lmlab.data.preparation.encode import SPLITS, dataset_record, reading_record
from lmlab.data.preparation.recipe import Recipe
from lmlab.data.preparation.stats import TokenStats
from lmlab.data.shards import TokenWriter
from lmlab.data.text.readers import ReadStats

COUNTS = "counts"
PARTS = "parts"
TOKENIZER = "tokenizer.json"


def write_counts(work: str, step: str, rank: int, counts: dict) -> None:
    folder = Path(work) / COUNTS
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{step}-{rank:05d}.json").write_text(json.dumps(counts))


def read_counts(work: str, step: str) -> list[dict]:
    return [json.loads(path.read_text())
            for path in sorted((Path(work) / COUNTS).glob(f"{step}-*.json"))]


def summed(counts: list[dict]) -> dict:
    """Counts of every task added key by key (nested counters included)."""
    total: dict = {}
    for one in counts:
        for key, value in one.items():
            if isinstance(value, dict):
                total[key] = dict(Counter(total.get(key, {})) + Counter(value))
            else:
                total[key] = total.get(key, 0) + value
    return total


def check_read(work: str, sources: list[str]) -> None:
    if summed(read_counts(work, "read")).get("documents", 0) == 0:
        raise DataError(f"{' '.join(sources)}: the corpus is empty (no documents)")


def merge(work: str, recipe: Recipe, staging: Path) -> dict:
    """The tasks' parts end to end in `staging`, and the rest of meta.json."""
    tokenizer = Tokenizer.from_file(f"{work}/{TOKENIZER}")
    vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
    parts = sorted((Path(work) / PARTS).iterdir())
    splits, token_stats = {}, []
    for split in SPLITS:
        writer = TokenWriter(staging, split, vocab_size)
        stats = TokenStats(vocab_size)
        for part in parts:
            writer.add_part(part)
            with np.load(part / "stats.npz") as saved:
                stats.frequencies += saved[f"{split}_frequencies"]
                stats.length_buckets += saved[f"{split}_length_buckets"]
        size = sum(json.loads((part / "splits.json").read_text())[split]["bytes"]
                   for part in parts)
        splits[split] = {**writer.close(), "bytes": size}
        token_stats.append(stats)
    return {**dataset_record(staging, recipe, tokenizer, splits, token_stats),
            "reading": _reading(work), "cleaning": cleaning(work).as_dict(),
            "cleaning_by_source": None, "mix": None}


def _reading(work: str) -> dict:
    read = summed(read_counts(work, "read"))
    return reading_record(ReadStats(**{**read, "skipped": Counter(read.get("skipped", {}))}))


def cleaning(work: str) -> CleaningReport:
    """The cleaning report of every task and dedup; nothing left is an error."""
    examined = summed(read_counts(work, "examine"))
    report = CleaningReport(**{**examined,
                               "quality_rejected": Counter(examined["quality_rejected"])})
    admitted = report.documents_in - report.empty - sum(report.quality_rejected.values())
    exact = summed(read_counts(work, "exact")).get("documents", admitted)
    near = summed(read_counts(work, "near")).get("documents", exact)
    report.exact_duplicates, report.near_duplicates = admitted - exact, exact - near
    report.documents_out = near
    if near == 0:
        raise DataError(f"no documents left after cleaning ({report.documents_in} in)")
    return report
