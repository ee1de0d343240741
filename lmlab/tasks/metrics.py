"""Task metrics for fine-tuning: classification, regression, extractive QA and NER.

Each follows the definition its benchmark reports (GLUE's accuracy, F1, Matthews correlation,
Pearson and Spearman; SQuAD's exact match and token F1; CoNLL's exact-span entity F1), so
scores compare with published ones. Only numpy is needed.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence

import numpy as np

_PUNCTUATION = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def _ratio(numerator: float, denominator: float) -> float:
    """numerator / denominator, or 0.0 where nothing was counted (no nan in a report)."""
    return float(numerator) / denominator if denominator else 0.0


def _f1(precision: float, recall: float) -> float:
    return _ratio(2 * precision * recall, precision + recall)


def _check_lengths(gold: Sequence, predicted: Sequence) -> None:
    if len(gold) != len(predicted):
        raise ValueError(f"{len(gold)} gold values but {len(predicted)} predicted")


def confusion_matrix(gold: Sequence[int], predicted: Sequence[int], num_labels: int) -> np.ndarray:
    """Counts of (gold, predicted) label pairs: rows are gold, columns predicted."""
    _check_lengths(gold, predicted)
    pairs = np.asarray([gold, predicted], dtype=np.int64)
    if pairs.size and (pairs.min() < 0 or pairs.max() >= num_labels):
        raise ValueError(f"labels must lie in [0, {num_labels}), got {pairs.min()}..{pairs.max()}")
    counts = np.zeros((num_labels, num_labels), dtype=np.int64)
    np.add.at(counts, (pairs[0], pairs[1]), 1)
    return counts


def classification_metrics(gold: Sequence[int], predicted: Sequence[int],
                           num_labels: int) -> dict[str, float]:
    """Accuracy, macro F1 over the labels seen in gold or predicted, and Matthews correlation in
    its multi-class form (Gorodkin 2004): CoLA's metric, 0 for any constant prediction however
    skewed the labels."""
    counts = confusion_matrix(gold, predicted, num_labels).astype(np.float64)
    total, correct = counts.sum(), np.trace(counts)
    gold_totals, predicted_totals = counts.sum(axis=1), counts.sum(axis=0)
    # per label, F1 = 2TP / (2TP + FP + FN) and 2TP + FP + FN = gold total + predicted total
    both = gold_totals + predicted_totals
    per_label_f1 = 2 * np.diag(counts)[both > 0] / both[both > 0]
    covariance = correct * total - predicted_totals @ gold_totals
    spread = ((total**2 - predicted_totals @ predicted_totals)
              * (total**2 - gold_totals @ gold_totals))
    return {"accuracy": _ratio(correct, total),
            "macro_f1": float(per_label_f1.mean()) if per_label_f1.size else 0.0,
            "mcc": _ratio(covariance, np.sqrt(spread))}


def _pearson(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson's r, 0.0 where a side is constant: r is undefined there, and a constant
    prediction carries no correlation."""
    if x.size == 0 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return 0.0
    dx, dy = x - x.mean(), y - y.mean()
    return float(dx @ dy / np.sqrt((dx @ dx) * (dy @ dy)))


def _average_ranks(values: np.ndarray) -> np.ndarray:
    """Ranks from 1, ties sharing the mean of their ranks, as Spearman's rho needs."""
    order = np.argsort(values, kind="stable")
    _, first, counts = np.unique(values[order], return_index=True, return_counts=True)
    ranks = np.empty(len(values))
    ranks[order] = np.repeat(first + (counts + 1) / 2, counts)
    return ranks


def regression_metrics(gold: Sequence[float], predicted: Sequence[float]) -> dict[str, float]:
    """Pearson and Spearman correlation (STS-B's metrics) and mean squared error."""
    _check_lengths(gold, predicted)
    x, y = np.asarray(gold, dtype=np.float64), np.asarray(predicted, dtype=np.float64)
    return {"pearson": _pearson(x, y),
            "spearman": _pearson(_average_ranks(x), _average_ranks(y)),
            "mse": float(np.mean((x - y) ** 2)) if x.size else 0.0}


def normalize_answer(text: str) -> str:
    """Lowercase, drop punctuation, drop the articles a/an/the, collapse whitespace: the steps,
    in that order, by which the official SQuAD v1.1 evaluation script normalises answers."""
    text = "".join(char for char in text.lower() if char not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def squad_exact_match(prediction: str, golds: Sequence[str]) -> float:
    """1.0 if the normalised prediction equals any normalised gold; no golds means unanswerable
    (SQuAD v2), where only the empty answer matches."""
    return max(float(normalize_answer(prediction) == normalize_answer(g)) for g in golds or [""])


def _token_f1(prediction: str, gold: str) -> float:
    predicted_tokens = normalize_answer(prediction).split()
    gold_tokens = normalize_answer(gold).split()
    if not predicted_tokens or not gold_tokens:
        return float(predicted_tokens == gold_tokens)
    common = sum((Counter(predicted_tokens) & Counter(gold_tokens)).values())
    return _f1(common / len(predicted_tokens), common / len(gold_tokens))


def squad_f1(prediction: str, golds: Sequence[str]) -> float:
    """Best bag-of-tokens F1 against any gold (repeated tokens count with multiplicity); no
    golds means unanswerable, scored against the empty answer."""
    return max(_token_f1(prediction, gold) for gold in golds or [""])


def squad_metrics(predictions: Sequence[str], golds: Sequence[Sequence[str]]) -> dict[str, float]:
    """Exact match and F1 as percentages averaged over questions, as SQuAD reports them."""
    pairs = list(zip(predictions, golds, strict=True))
    return {"exact_match": 100 * _ratio(sum(squad_exact_match(*p) for p in pairs), len(pairs)),
            "f1": 100 * _ratio(sum(squad_f1(*p) for p in pairs), len(pairs))}


def entity_spans(tags: Sequence[str]) -> list[tuple[str, int, int]]:
    """(type, start, end_exclusive) of each entity under strict IOB2: an entity opens only at
    B-X and runs over the I-X after it; a stray I-X opens nothing, so a tagger is not credited
    with an entity whose beginning it missed."""
    spans: list[tuple[str, int, int]] = []
    open_type, start = None, 0
    for position, tag in enumerate([*tags, "O"]):
        prefix, _, kind = tag.partition("-")
        if tag != "O" and (prefix not in ("B", "I") or not kind):
            raise ValueError(f"tag {tag!r} at position {position} is not O, B-TYPE or I-TYPE")
        if prefix == "I" and kind == open_type:
            continue
        if open_type is not None:
            spans.append((open_type, start, position))
        open_type, start = (kind if prefix == "B" else None), position
    return spans


def _span_scores(gold: set, predicted: set) -> dict[str, float]:
    correct = len(gold & predicted)
    precision, recall = _ratio(correct, len(predicted)), _ratio(correct, len(gold))
    return {"precision": precision, "recall": recall, "f1": _f1(precision, recall)}


def entity_metrics(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]) -> dict:
    """Micro precision, recall and F1 over entities, each right only if its type, start and end
    all match (as the CoNLL evaluation counts them); the same per type, with its gold support;
    and the share of tags predicted right."""
    _check_lengths(gold, predicted)
    gold_entities, predicted_entities, matching_tags, total_tags = set(), set(), 0, 0
    for index, (gold_tags, predicted_tags) in enumerate(zip(gold, predicted, strict=True)):
        if len(gold_tags) != len(predicted_tags):
            raise ValueError(f"sentence {index} has {len(gold_tags)} gold tags but "
                             f"{len(predicted_tags)} predicted")
        gold_entities.update((*span, index) for span in entity_spans(gold_tags))
        predicted_entities.update((*span, index) for span in entity_spans(predicted_tags))
        matching_tags += sum(g == p for g, p in zip(gold_tags, predicted_tags, strict=True))
        total_tags += len(gold_tags)
    per_type = {}
    for kind in sorted({entity[0] for entity in gold_entities | predicted_entities}):
        gold_of_kind = {entity for entity in gold_entities if entity[0] == kind}
        predicted_of_kind = {entity for entity in predicted_entities if entity[0] == kind}
        per_type[kind] = {**_span_scores(gold_of_kind, predicted_of_kind),
                          "support": len(gold_of_kind)}
    return {**_span_scores(gold_entities, predicted_entities),
            "token_accuracy": _ratio(matching_tags, total_tags), "per_type": per_type}


# --- per-example scores ---------------------------------------------------------------------
# A paired comparison of two models resamples test examples, so it needs each metric as a mean
# over examples. Accuracy and SQuAD F1 are such means already; a ratio (entity F1) or a
# correlation (Pearson) is not, and is replaced by its linearisation: per-example values whose
# mean is exactly the metric and whose spread is the metric's delta-method variance (the
# influence function, Hampel 1974; for ratio estimators, Cochran 1977 §6.3).


def linearized_ratio(numerators: Sequence[float], denominators: Sequence[float],
                     ) -> np.ndarray:
    """Per-example values of R = Σ numerators / Σ denominators: R + (n_i - R·d_i) / mean(d)."""
    n, d = np.asarray(numerators, dtype=np.float64), np.asarray(denominators, dtype=np.float64)
    if not d.sum():
        return np.zeros_like(n)
    ratio = n.sum() / d.sum()
    return ratio + (n - ratio * d) / d.mean()


def pearson_items(x: Sequence[float], y: Sequence[float]) -> np.ndarray:
    """Per-example values of Pearson's r: r + z_x·z_y - r·(z_x² + z_y²)/2 (the influence
    function of the correlation, Devlin, Gnanadesikan & Kettenring 1975); all 0 where r is."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    r = _pearson(x, y)
    if r == 0.0 and (x.size == 0 or np.ptp(x) == 0 or np.ptp(y) == 0):
        return np.zeros_like(x)
    zx, zy = (x - x.mean()) / x.std(), (y - y.mean()) / y.std()
    return r + zx * zy - r * (zx**2 + zy**2) / 2


def entity_f1_items(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]],
                    ) -> np.ndarray:
    """Per-sentence values of micro entity F1 = 2·correct / (gold + predicted entities)."""
    _check_lengths(gold, predicted)
    counts = []
    for gold_tags, predicted_tags in zip(gold, predicted, strict=True):
        gold_spans, predicted_spans = set(entity_spans(gold_tags)), set(entity_spans(
            predicted_tags))
        counts.append((2 * len(gold_spans & predicted_spans),
                       len(gold_spans) + len(predicted_spans)))
    numerators, denominators = zip(*counts, strict=True) if counts else ((), ())
    return linearized_ratio(numerators, denominators)
