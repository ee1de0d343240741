"""What each pre-trained run of a comparison is scored on, item by item, each measure in the
way its objective allows.

- **bits per byte** on held-out text, for runs with a true likelihood (causal or prefix
  scoring: lmlab.eval.rules). Lower is better.
- **pseudo bits per byte (RULE)**, for runs scored by masking (pseudo-log-likelihood, Salazar
  et al. 2020) or span corruption: each rule its own measure, never ranked against a true
  likelihood or another rule, since each reads different context.
- **next-token accuracy** on the same text, for those runs (they can generate): how often the
  most likely next token is the one that follows. Higher is better.
- **minimal pairs**: the share of pairs whose good sentence scores higher, under the run's own
  first rule.
- **probe NAME**: a fine-tuning task's main metric, per test example.

Item values average to the measure (bits per byte is linearised per document, as
lmlab.tasks.metrics linearises ratios), so paired comparisons can resample items.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lmlab.data.dataset import Dataset, open_dataset
from lmlab.eval.evaluate import score_texts
from lmlab.eval.minimal_pairs import read_minimal_pairs
from lmlab.eval.rules import rules_for
from lmlab.eval.scoring import score_documents
from lmlab.eval.texts import EvalText, dataset_text
from lmlab.runs import Run
from lmlab.tasks.metrics import linearized_ratio

BITS_PER_BYTE = "bits per byte"
NEXT_TOKEN = "next-token accuracy"
MINIMAL_PAIRS = "minimal pairs"
# Held-out text is resampled document by document in the paired bootstrap: two at the least.
MIN_DOCUMENTS = 2


@dataclass(frozen=True)
class Measure:
    name: str
    higher_is_better: bool
    kind: str  # "text", "minimal pairs" or "probe"


def measure_of(name: str) -> Measure:
    """A measure from its name, as this module names them."""
    if name.startswith("probe "):
        return Measure(name, True, "probe")
    if name == MINIMAL_PAIRS:
        return Measure(name, True, "minimal pairs")
    if name == NEXT_TOKEN:
        return Measure(name, True, "text")
    return Measure(name, False, "text")  # bits per byte, true or pseudo: lower is better


def pseudo_measure(rule: str) -> str:
    return f"pseudo bits per byte ({rule})"


def probe_measure(probe: str, metric: str) -> str:
    return f"probe {probe} ({metric})"


@dataclass(frozen=True)
class HeldOut:
    """Held-out documents with the UTF-8 bytes of each."""

    text: EvalText
    document_bytes: np.ndarray

    @classmethod
    def of(cls, run: Run, data: str | Path, max_tokens: int) -> HeldOut:
        check_held_out(open_dataset(Path(data)), max_tokens)
        text = dataset_text(data, "validation", run, max_tokens)
        decoded = run.tokenizer.decode_batch([d.tolist() for d in text.documents],
                                             skip_special_tokens=True)
        return cls(text, np.array([len(t.encode("utf-8")) for t in decoded], dtype=float))


def check_held_out(dataset: Dataset, max_tokens: int) -> None:
    """Fail, before any training, where the validation documents that `max_tokens`
    (--eval-tokens) keeps are too few to compare, naming the value that keeps enough."""
    needed = _tokens_keeping(dataset, MIN_DOCUMENTS)
    count = len(dataset.validation.document_spans())
    if needed is None:
        raise ValueError(f"{dataset.path}: the validation split holds {count} document(s); "
                         f"comparing held-out text needs at least {MIN_DOCUMENTS}: prepare the "
                         f"data with a larger --validation-fraction")
    if max_tokens < needed:
        raise ValueError(f"--eval-tokens {max_tokens} keeps {MIN_DOCUMENTS - 1} of the {count} "
                         f"validation documents of {dataset.path}; comparing held-out text "
                         f"needs at least {MIN_DOCUMENTS}: give --eval-tokens {needed} or more")


def _tokens_keeping(dataset: Dataset, documents: int) -> int | None:
    """The least max_tokens for which the held-out text keeps `documents` non-empty validation
    documents (lmlab.eval.texts takes one more while fewer than max_tokens are taken); None
    where the split has fewer."""
    stream, eos = dataset.validation, dataset.special.eos
    taken = found = 0
    for start, stop in stream.document_spans().tolist():
        length = stop - start - int(stop > start and stream.read(stop - 1, stop)[0] == eos)
        if length:
            found += 1
            if found == documents:
                return taken + 1
        taken += length
    return None


def text_scores(run: Run, held_out: HeldOut,
                learned: Collection[str] | None = None) -> dict[str, np.ndarray]:
    """Per held-out document: bits per byte and next-token accuracy under the run's first
    true likelihood, and pseudo bits per byte under each pseudo-likelihood rule it has; with
    `learned`, only under rules whose head is one of those (the heads that were trained)."""
    found = {}
    for rule in rules_for(run.objective, run.special):
        likelihood = rule.perplexity_name == "perplexity"
        name = BITS_PER_BYTE if likelihood else pseudo_measure(rule.name)
        if name in found or (learned is not None and rule.head not in learned):
            continue
        scores = score_documents(run.model, rule, held_out.text.documents)
        bits = -scores.log_likelihood / np.log(2)
        found[name] = linearized_ratio(bits, held_out.document_bytes)
        if likelihood:
            found[NEXT_TOKEN] = linearized_ratio(scores.top1, scores.predictions)
    return found


def first_rule_head(run: Run) -> str:
    """The head that minimal pairs are scored through: the run's first rule's."""
    return rules_for(run.objective, run.special)[0].head


def minimal_pair_scores(run: Run, minimal_pairs: Sequence) -> np.ndarray:
    """1 where the good sentence of a minimal pair scores higher under the run's first rule,
    else 0."""
    sentences = list(dict.fromkeys(s for p in minimal_pairs for s in (p.good, p.bad)))
    scores = score_texts(run, sentences).log_likelihood
    by_sentence = dict(zip(sentences, scores, strict=True))
    return np.array([float(by_sentence[p.good] > by_sentence[p.bad]) for p in minimal_pairs])


def minimal_pair_groups(paths: Sequence[str]) -> tuple[list, list[str]]:
    """The minimal pairs of `paths` and each one's phenomenon (its UID, else its file's
    name)."""
    minimal_pairs = read_minimal_pairs(paths)
    return minimal_pairs, [p.groups.get("UID", p.groups["file"]) for p in minimal_pairs]
