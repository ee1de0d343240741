"""Mixing sources by weight, and the `SOURCE:WEIGHT` specs that give the weights.

A source (a file, directory or glob: see readers.py) may carry a weight: `corpus.jsonl:0.7`.
The mix up- or down-samples whole documents so that each source gives its requested share,
and records the share each source actually gave.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np

from lmlab.data.errors import DataError

T = TypeVar("T")


@dataclass(frozen=True)
class SourceSpec:
    """A path, directory or glob, and its mixing weight (None when none was given)."""

    pattern: str
    weight: float | None = None


def parse_source(spec: str) -> SourceSpec:
    """`"corpus.jsonl:0.7"` → pattern and weight; a trailing `:<number>` is the weight.

    A spec that names an existing path is a path even if it ends like a weight.
    """
    pattern, colon, weight = spec.rpartition(":")
    if not colon or Path(spec).exists():
        return SourceSpec(spec)
    try:
        value = float(weight)
    except ValueError:
        return SourceSpec(spec)  # a ':' inside the path, not a weight
    if not (math.isfinite(value) and value > 0):
        raise DataError(f"{spec}: the weight must be a positive number, got {weight!r}")
    return SourceSpec(pattern, value)


@dataclass
class MixedSource:
    """One source in a mix: its target share, the multiplier that meets it, what happened.

    Weights are relative target shares of documents: `a:0.7 b:0.3` asks for 70% of the mixed
    documents from `a`. The mix keeps the corpus's total document count, so each source is
    up-sampled (repeated) or down-sampled by `multiplier = share * total / documents`.
    """

    name: str
    documents: int
    share: float
    multiplier: float
    documents_in: int = 0
    documents_out: int = 0


def plan_mix(counts: Mapping[str, int], weights: Mapping[str, float] | None) -> list[MixedSource]:
    """Multipliers that turn per-source document counts into the weighted shares.

    With no weights each source keeps its documents (multiplier 1).
    """
    total = sum(counts.values())
    if total == 0:
        raise DataError("the corpus is empty (no documents in any source)")
    if weights is None:
        return [MixedSource(name, n, n / total, 1.0) for name, n in counts.items()]
    if set(weights) != set(counts):
        raise DataError("give every source a weight, or none "
                        f"(weighted: {', '.join(weights) or 'none'})")
    weight_sum = sum(weights.values())
    plan = []
    for name, documents in counts.items():
        share = weights[name] / weight_sum
        if documents == 0:
            raise DataError(f"{name}: weighted {share:.0%} of the mix but has no documents")
        plan.append(MixedSource(name, documents, share, share * total / documents))
    return plan


def resample(items: Iterable[T], multiplier: float, rng: np.random.Generator) -> Iterator[T]:
    """Each item `floor(multiplier)` times, plus once more with the fractional probability:
    the expected count is exactly `multiplier` per item, and copies stay whole documents."""
    whole, fraction = divmod(multiplier, 1.0)
    for item in items:
        for _ in range(int(whole) + int(rng.random() < fraction)):
            yield item


_DONE = object()  # an exhausted stream, distinct from any item


def mix(streams: Sequence[Iterable[T]], plan: Sequence[MixedSource], seed: int) -> Iterator[T]:
    """Resample each stream by its plan's multiplier and interleave them evenly.

    Deterministic for a seed. Interleaving takes next the source furthest behind its expected
    output, so any stretch of the result has about the target shares (training need not see
    one source after another). Counts land in `plan` (`documents_in`, `documents_out`) as the
    mix is consumed; `realised_shares(plan)` reads them afterwards.

    Mix after deduplication: exact dedup would remove the copies up-sampling makes.
    """
    iterators = []
    for index, (stream, source) in enumerate(zip(streams, plan, strict=True)):
        rng = np.random.default_rng([seed, index])
        iterators.append(resample(_counting(stream, source), source.multiplier, rng))
    expected = [max(s.documents * s.multiplier, 1e-9) for s in plan]
    queue = [(0.0, index) for index in range(len(plan))]
    while queue:
        _, index = heapq.heappop(queue)
        item = next(iterators[index], _DONE)
        if item is _DONE:
            continue
        plan[index].documents_out += 1
        yield item
        heapq.heappush(queue, (plan[index].documents_out / expected[index], index))


def _counting(stream: Iterable[T], source: MixedSource) -> Iterator[T]:
    for item in stream:
        source.documents_in += 1
        yield item


def realised_shares(plan: Sequence[MixedSource]) -> dict[str, float]:
    """The share of the mixed documents each source actually gave."""
    total = sum(s.documents_out for s in plan)
    return {s.name: s.documents_out / total if total else 0.0 for s in plan}
