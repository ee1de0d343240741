"""Cleaning documents: normalise, strip control characters, drop empties, exact duplicates,
low-quality documents and near-duplicates, in that order, each step optional and counted.
Near-duplicates are found by near_dedup.py; this module batches documents for it.

The train/validation split is here too because it hashes the same cleaned text: a document
lands in the same split on every run and on every machine.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field

import numpy as np

from lmlab.data.errors import DataError
from lmlab.data.preparation.choices import NORMALISATIONS
from lmlab.data.preparation.near_dedup import NearDedupConfig, NearDeduplicator

# Unicode category Cc (C0, DEL, C1) except tab and newline, which carry layout.
CONTROL_CHARACTERS = dict.fromkeys(
    c for c in [*range(0x00, 0x20), *range(0x7F, 0xA0)] if c not in (0x09, 0x0A))
NEAR_DEDUP_BATCH = 1024  # documents hashed together: numpy work per call, bounded memory
NEAR_DEDUP_BATCH_CHARS = 1 << 20  # ... or fewer, when they are long


# ---------------------------------------------------------------- configuration and report


@dataclass(frozen=True)
class QualityThresholds:
    """Gopher's quality rules (Rae et al. 2021, "Scaling Language Models", appendix A.1.1),
    with the paper's values as defaults. They were tuned on web crawl: loosen them for short
    or unusual documents (code, tweets, sentence lists)."""

    min_words: int = 50
    max_words: int = 100_000
    min_mean_word_length: float = 3.0
    max_mean_word_length: float = 10.0
    max_symbol_word_ratio: float = 0.1  # '#' and ellipses per word
    min_alphabetic_word_fraction: float = 0.8  # words with at least one letter
    max_bullet_line_fraction: float = 0.9
    max_ellipsis_line_fraction: float = 0.3
    max_duplicate_line_fraction: float = 0.3
    max_duplicate_line_char_fraction: float = 0.2
    max_duplicate_paragraph_fraction: float = 0.3
    max_duplicate_paragraph_char_fraction: float = 0.2
    # (n, limit): characters in the most frequent repeated word n-gram, over all word chars.
    max_top_ngram_char_fraction: tuple[tuple[int, float], ...] = ((2, 0.20), (3, 0.18),
                                                                  (4, 0.16))
    # (n, limit): characters covered by any repeated word n-gram, over all word chars.
    max_duplicate_ngram_char_fraction: tuple[tuple[int, float], ...] = (
        (5, 0.15), (6, 0.14), (7, 0.13), (8, 0.12), (9, 0.11), (10, 0.10))


@dataclass(frozen=True)
class CleaningConfig:
    """Which steps run. Gopher's quality rules are off by default: they suit web crawl, and
    on a user's own curated text (short records, code) they can drop most of it."""

    normalisation: str = "NFC"
    strip_control: bool = True
    exact_dedup: bool = True
    near_dedup: NearDedupConfig | None = NearDedupConfig()
    quality: QualityThresholds | None = None

    def __post_init__(self):
        if self.normalisation not in NORMALISATIONS:
            raise ValueError(f"normalisation must be one of {', '.join(NORMALISATIONS)}, got "
                             f"{self.normalisation!r}")


@dataclass
class CleaningReport:
    """Counts per step. `changed` steps rewrite documents; the others remove them."""

    documents_in: int = 0
    normalised_changed: int = 0
    control_stripped: int = 0
    empty: int = 0
    exact_duplicates: int = 0
    quality_rejected: Counter = field(default_factory=Counter)  # filter name -> documents
    near_duplicates: int = 0
    documents_out: int = 0

    def steps(self) -> list[dict]:
        """Documents in and out of each removing step, in pipeline order."""
        rows, remaining = [], self.documents_in
        for step, removed in [("empty", self.empty), ("exact_dedup", self.exact_duplicates),
                              ("quality", sum(self.quality_rejected.values())),
                              ("near_dedup", self.near_duplicates)]:
            rows.append({"step": step, "in": remaining, "out": remaining - removed})
            remaining -= removed
        return rows

    def as_dict(self) -> dict:
        return {**asdict(self), "quality_rejected": dict(self.quality_rejected),
                "steps": self.steps()}


# ---------------------------------------------------------------- rewriting steps


def normalise(text: str, form: str = "NFC") -> str:
    return text if form == "none" else unicodedata.normalize(form, text)


def strip_control(text: str) -> str:
    """Control characters removed, except tab and newline; Windows and old-Mac line ends
    become newlines first, so that lines do not run together."""
    return text.replace("\r\n", "\n").replace("\r", "\n").translate(CONTROL_CHARACTERS)


def document_digest(text: str) -> bytes:
    """16 bytes identify a document: one digest per document is all exact dedup keeps."""
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()


def split_of(text: str, validation_fraction: float) -> str:
    """"train" or "validation", from a hash of the cleaned text read as a number in [0, 1)."""
    if not 0 <= validation_fraction < 1:
        raise ValueError(f"validation fraction must be in [0, 1), got {validation_fraction}")
    value = int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "big")
    return "validation" if value / 2**64 < validation_fraction else "train"


# ---------------------------------------------------------------- Gopher quality rules

BULLETS = ("•", "‣", "◦", "▪", "●", "-", "*", "–", "—")
ELLIPSES = ("...", "…")
HAS_LETTER = re.compile(r"[^\W\d_]")
PARAGRAPH_BREAK = re.compile(r"\n\s*\n")


def _duplicate_fractions(parts: list[str]) -> tuple[float, float]:
    """(fraction of parts, fraction of their characters) that repeat an earlier part."""
    seen: set[str] = set()
    count = chars = 0
    for part in parts:
        if part in seen:
            count += 1
            chars += len(part)
        seen.add(part)
    total_chars = sum(map(len, parts))
    return count / len(parts), chars / total_chars if total_chars else 0.0


def _ngrams(words: list[str], n: int) -> list[tuple[str, ...]]:
    return list(zip(*(words[i:] for i in range(n)), strict=False))


def _top_ngram_char_fraction(words: list[str], n: int, word_chars: int) -> float:
    counts = Counter(_ngrams(words, n))
    if not counts:
        return 0.0
    gram, count = counts.most_common(1)[0]
    return count * sum(map(len, gram)) / word_chars if count > 1 else 0.0


def _duplicate_ngram_char_fraction(words: list[str], n: int, lengths: np.ndarray) -> float:
    grams = _ngrams(words, n)
    counts = Counter(grams)
    starts = np.array([i for i, gram in enumerate(grams) if counts[gram] > 1], dtype=np.int64)
    if starts.size == 0:
        return 0.0
    # Mark every word inside a repeated n-gram once, however many n-grams overlap it.
    depth = np.zeros(len(words) + 1, dtype=np.int64)
    np.add.at(depth, starts, 1)
    np.add.at(depth, starts + n, -1)
    covered = np.cumsum(depth[:-1]) > 0
    return float(lengths[covered].sum() / lengths.sum())


def quality_rejection(text: str, limits: QualityThresholds) -> str | None:
    """The name of the first Gopher rule `text` fails (cheap rules first), or None."""
    words = text.split()
    if not words or not limits.min_words <= len(words) <= limits.max_words:
        return "word_count"
    lengths = np.fromiter(map(len, words), dtype=np.int64, count=len(words))
    word_chars = int(lengths.sum())
    if not limits.min_mean_word_length <= word_chars / len(words) <= \
            limits.max_mean_word_length:
        return "mean_word_length"
    symbols = text.count("#") + sum(text.count(e) for e in ELLIPSES)
    if symbols / len(words) > limits.max_symbol_word_ratio:
        return "symbol_word_ratio"
    alphabetic = sum(1 for w in words if HAS_LETTER.search(w))
    if alphabetic / len(words) < limits.min_alphabetic_word_fraction:
        return "alphabetic_words"
    lines = [line.strip() for line in text.split("\n") if line.strip()]
    if sum(line.startswith(BULLETS) for line in lines) / len(lines) > \
            limits.max_bullet_line_fraction:
        return "bullet_lines"
    if sum(line.endswith(ELLIPSES) for line in lines) / len(lines) > \
            limits.max_ellipsis_line_fraction:
        return "ellipsis_lines"
    line_fraction, line_chars = _duplicate_fractions(lines)
    if line_fraction > limits.max_duplicate_line_fraction:
        return "duplicate_lines"
    if line_chars > limits.max_duplicate_line_char_fraction:
        return "duplicate_line_chars"
    paragraphs = [p.strip() for p in PARAGRAPH_BREAK.split(text) if p.strip()]
    paragraph_fraction, paragraph_chars = _duplicate_fractions(paragraphs)
    if paragraph_fraction > limits.max_duplicate_paragraph_fraction:
        return "duplicate_paragraphs"
    if paragraph_chars > limits.max_duplicate_paragraph_char_fraction:
        return "duplicate_paragraph_chars"
    for n, limit in limits.max_top_ngram_char_fraction:
        if _top_ngram_char_fraction(words, n, word_chars) > limit:
            return f"top_{n}gram_chars"
    for n, limit in limits.max_duplicate_ngram_char_fraction:
        if _duplicate_ngram_char_fraction(words, n, lengths) > limit:
            return f"duplicate_{n}gram_chars"
    return None


# ---------------------------------------------------------------- the pipeline


@dataclass(frozen=True)
class Examined:
    """A document after the steps that need no other document: its cleaned text (None when
    nothing is left), whether normalisation and control stripping changed it, its digest for
    exact dedup and the first quality rule it fails."""

    text: str | None
    normalised: bool = False
    control_stripped: bool = False
    digest: bytes | None = None
    rejection: str | None = None


def examine(text: str, config: CleaningConfig) -> Examined:
    normalised = normalise(text, config.normalisation)
    changed = normalised != text
    stripped = False
    if config.strip_control:
        without = strip_control(normalised)
        stripped, normalised = without != normalised, without
    cleaned = normalised.strip()
    if not cleaned:
        return Examined(None, changed, stripped)
    return Examined(cleaned, changed, stripped,
                    document_digest(cleaned) if config.exact_dedup else None,
                    quality_rejection(cleaned, config.quality) if config.quality else None)


class Cleaner:
    """The steps that depend on the documents before: exact and near dedup, in the order the
    documents come, counted into `report`. Examining documents (and hashing them for near
    dedup) may happen elsewhere, in any order: the decisions are the same."""

    def __init__(self, config: CleaningConfig, report: CleaningReport) -> None:
        self.report = report
        self.digests: set[bytes] | None = set() if config.exact_dedup else None
        self.near = NearDeduplicator(config.near_dedup) if config.near_dedup else None

    def admit(self, document: Examined) -> bool:
        """Count `document`; True when it goes on to near dedup."""
        report = self.report
        report.documents_in += 1
        report.normalised_changed += document.normalised
        report.control_stripped += document.control_stripped
        if document.text is None:
            report.empty += 1
            return False
        if self.digests is not None:
            if document.digest in self.digests:
                report.exact_duplicates += 1
                return False
            self.digests.add(document.digest)
        if document.rejection is not None:
            report.quality_rejected[document.rejection] += 1
            return False
        return True

    def kept(self, texts: list[str], band_keys: list[list[bytes]] | None = None
             ) -> Iterator[str]:
        """The admitted `texts` that are not near-duplicates (their band keys: computed here
        when not given)."""
        if self.near is None:
            keep = np.ones(len(texts), dtype=bool)
        else:
            keep = self.near.keep_keys(self.near.band_keys(texts) if band_keys is None
                                       else band_keys)
        self.report.near_duplicates += int((~keep).sum())
        self.report.documents_out += int(keep.sum())
        yield from (text for text, kept in zip(texts, keep, strict=True) if kept)

    def finish(self) -> None:
        """Training on nothing is never intended: DataError when nothing is left."""
        report = self.report
        if report.documents_out == 0:
            steps = ", ".join(f"{row['step']} {row['in']}→{row['out']}"
                              for row in report.steps())
            raise DataError(f"no documents left after cleaning ({report.documents_in} in; "
                            f"{steps})")


def clean(documents: Iterable[str], config: CleaningConfig = CleaningConfig(),
          report: CleaningReport | None = None) -> Iterator[str]:
    """Stream the cleaned documents, counting into `report`; near-duplicates are hashed a
    batch at a time (NEAR_DEDUP_BATCH documents or NEAR_DEDUP_BATCH_CHARS characters).

    Raises DataError at the end if nothing is left.
    """
    cleaner = Cleaner(config, CleaningReport() if report is None else report)
    pending: list[str] = []
    pending_chars = 0
    for text in documents:
        document = examine(text, config)
        if not cleaner.admit(document):
            continue
        pending.append(document.text)
        pending_chars += len(document.text)
        if cleaner.near is None or len(pending) == NEAR_DEDUP_BATCH or \
                pending_chars >= NEAR_DEDUP_BATCH_CHARS:
            yield from cleaner.kept(pending)
            pending, pending_chars = [], 0
    yield from cleaner.kept(pending)
    cleaner.finish()
