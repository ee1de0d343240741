"""The built-in engine: every step in this process and its workers, on one machine.

Steps, each counted: read (readers.py: a bad record is skipped and counted, or fatal with
`strict`); clean (cleaning.py, near_dedup.py); mix weighted sources by up- or down-sampling
(mixing.py); split train and validation by a hash of each document; train or load the
tokenizer; encode in parallel batches (the tokenizer's Rust threads) and stream ids and
sentence offsets to disk (encode.py).

Memory stays bounded: documents move in chunks, and all that grows per document is the
dedup digests. Weighted sources are cleaned one by one (a document repeated across sources
stays in each: the weights decide how much of each source to keep), and mixed afterwards, so
that deduplication never removes the copies up-sampling makes.

The tokenizer must see the training split before anything is encoded, and a mix needs every
source's count, so in those cases cleaned documents first go to a temporary file. With a
given tokenizer and no weights nothing is written twice: a background thread reads and
cleans while the encoder works.
"""

from __future__ import annotations

import json
import platform
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, fields, replace
from itertools import chain
from pathlib import Path

from tokenizers import Tokenizer

from lmlab.data.errors import DataError
from lmlab.data.preparation.cleaning import CleaningReport
from lmlab.data.preparation.directory import make_dataset
from lmlab.data.preparation.encode import (
    dataset_record,
    encode_splits,
    given_tokenizer,
    reading_record,
    train_on,
)
from lmlab.data.preparation.mixing import MixedSource, SourceSpec, mix, plan_mix, realised_shares
from lmlab.data.preparation.parallel import Workers, worker_count
from lmlab.data.preparation.recipe import Recipe
from lmlab.data.preparation.split_check import checked_splits
from lmlab.data.preparation.streaming import Progress, chunked, in_background
from lmlab.data.text.builtin_corpus import builtin_documents
from lmlab.data.text.readers import ReadStats, read_sources


@dataclass
class _Group:
    """Documents cleaned together: all sources (no weights), or one weighted source."""

    name: str
    documents: Callable[[ReadStats], Iterator[str]]
    weight: float | None = None


def prepare_sources(specs: list[SourceSpec], out: Path, recipe: Recipe, inputs: list[dict],
                    input_bytes: int, workers: int | None) -> Path:
    """The dataset of the recipe's sources (all weighted, or none)."""
    def reader(patterns: list[str]) -> Callable[[ReadStats], Iterator[str]]:
        return lambda stats: read_sources(patterns, recipe.text_field,
                                          recipe.blank_line_documents, strict=recipe.strict,
                                          stats=stats)

    if specs[0].weight is not None:
        groups = [_Group(spec.pattern, reader([spec.pattern]), spec.weight) for spec in specs]
    else:
        groups = [_Group("all sources", reader([spec.pattern for spec in specs]))]
    return _prepare(groups, out, recipe, inputs, input_bytes,
                    worker_count(workers, input_bytes))


def prepare_builtin_corpus(out: Path, recipe: Recipe, workers: int | None) -> Path:
    group = _Group("builtin", lambda stats: _counted(builtin_documents(), stats))
    return _prepare([group], out, recipe, [{"builtin": platform.python_version()}], None,
                    worker_count(workers, None))


def prepare_texts(documents: Iterable[str], out: Path, recipe: Recipe) -> Path:
    """Documents already in Python (strings), not fingerprinted."""
    group = _Group("documents", lambda stats: _counted(documents, stats))
    return _prepare([group], out, recipe, [], None)


def _counted(documents: Iterable[str], stats: ReadStats) -> Iterator[str]:
    for text in documents:
        stats.documents += 1
        yield text


def _prepare(groups: list[_Group], out: Path, recipe: Recipe, inputs: list[dict],
             input_bytes: int | None, workers: int = 1) -> Path:
    def build(work: Path) -> dict:
        with Workers(workers) as pool:
            return _build(groups, recipe, work, input_bytes, pool)

    return make_dataset(out, recipe, inputs, build)


def _build(groups: list[_Group], recipe: Recipe, work: Path, input_bytes: int | None,
           workers: Workers) -> dict:
    reading = ReadStats()
    reports = [CleaningReport() for _ in groups]
    cleaned = checked_splits([_cleaned(group, recipe, reading, report, len(groups) > 1, workers)
                              for group, report in zip(groups, reports, strict=True)],
                             recipe.validation_fraction, recipe.blank_line_documents)
    weighted = groups[0].weight is not None
    plan = None
    if recipe.trains_tokenizer or weighted:
        tokenizer, chunks, plan, encode_bytes = _through_spills(groups, cleaned, recipe, work,
                                                                input_bytes)
    else:
        tokenizer = given_tokenizer(recipe)
        chunks = in_background(chunked(chain.from_iterable(cleaned)))
        encode_bytes = input_bytes
    splits, token_stats = encode_splits(chunks, tokenizer, recipe, work, encode_bytes, workers)
    for spill in work.glob("cleaned-*.jsonl"):
        spill.unlink()
    return {**dataset_record(work, recipe, tokenizer, splits, token_stats),
            "reading": reading_record(reading),
            "cleaning": _combined(reports).as_dict(),
            "cleaning_by_source": {g.name: r.as_dict() for g, r in zip(groups, reports,
                                                                       strict=True)}
            if weighted else None,
            "mix": _mix_report(plan) if weighted else None}


def _through_spills(groups: list[_Group], cleaned: list[Iterator[str]], recipe: Recipe,
                    work: Path, input_bytes: int | None
                    ) -> tuple[Tokenizer, Iterator[list[str]], list[MixedSource], float]:
    """Clean every group into a temporary file, then train the tokenizer (if asked) on the
    mix's training split: (tokenizer, chunks of the mix to encode, the mix plan, its bytes)."""
    spills, counts, spilled_bytes = [], {}, 0
    with Progress("read and clean", input_bytes) as progress:
        for index, (group, documents) in enumerate(zip(groups, cleaned, strict=True)):
            spills.append(work / f"cleaned-{index}.jsonl")
            counts[group.name], size = _spill(documents, spills[-1], progress)
            spilled_bytes += size
    weighted = groups[0].weight is not None
    plan = plan_mix(counts, {g.name: g.weight for g in groups} if weighted else None)

    def mixed(plan: list[MixedSource]) -> Iterator[str]:
        return mix([_read_spill(path) for path in spills], plan, recipe.seed)

    if recipe.trains_tokenizer:
        tokenizer = train_on(mixed(_fresh(plan)), recipe, spilled_bytes)
    else:
        tokenizer = given_tokenizer(recipe)
    mixed_bytes = spilled_bytes * sum(s.multiplier * s.documents for s in plan) / \
        sum(counts.values())
    return tokenizer, chunked(mixed(plan)), plan, mixed_bytes


def _cleaned(group: _Group, recipe: Recipe, reading: ReadStats, report: CleaningReport,
             name_it: bool, workers: Workers) -> Iterator[str]:
    try:
        yield from workers.clean(group.documents(reading), recipe.cleaning(), report)
    except DataError as error:
        if not name_it:
            raise
        raise DataError(f"{group.name}: {error}") from None


def _spill(documents: Iterable[str], path: Path, progress: Progress) -> tuple[int, int]:
    """Write cleaned documents as JSON lines; (documents, UTF-8 bytes of their text)."""
    count = size = 0
    with open(path, "w", encoding="utf-8") as f:
        for chunk in chunked(documents):
            chunk_bytes = sum(len(text.encode("utf-8")) for text in chunk)
            f.writelines(json.dumps(text, ensure_ascii=False) + "\n" for text in chunk)
            count, size = count + len(chunk), size + chunk_bytes
            progress.update(len(chunk), chunk_bytes)
    return count, size


def _read_spill(path: Path) -> Iterator[str]:
    with open(path, encoding="utf-8") as f:
        for line in f:
            yield json.loads(line)


def _fresh(plan: list[MixedSource]) -> list[MixedSource]:
    """The plan with its counters at zero, for another pass over the mix."""
    return [replace(s, documents_in=0, documents_out=0) for s in plan]


def _combined(reports: list[CleaningReport]) -> CleaningReport:
    total = CleaningReport()
    for report in reports:
        for f in fields(CleaningReport):
            setattr(total, f.name, getattr(total, f.name) + getattr(report, f.name))
    return total


def _mix_report(plan: list[MixedSource]) -> list[dict]:
    realised = realised_shares(plan)
    return [{"source": s.name, "requested_share": s.share, "realised_share": realised[s.name],
             "multiplier": s.multiplier, "documents_in": s.documents_in,
             "documents_out": s.documents_out} for s in plan]
