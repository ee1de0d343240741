"""Cleaning documents: normalise, strip control characters, drop empties, exact duplicates,
low-quality documents and near-duplicates, in that order, each step optional and counted.

The train/validation split is here too because it hashes the same cleaned text: a document
lands in the same split on every run and on every machine.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field

import numpy as np

from lmlab.data.errors import DataError

NORMALISATIONS = ("NFC", "NFKC", "none")
# Unicode category Cc (C0, DEL, C1) except tab and newline, which carry layout.
CONTROL_CHARACTERS = dict.fromkeys(
    c for c in [*range(0x00, 0x20), *range(0x7F, 0xA0)] if c not in (0x09, 0x0A))
NEAR_DEDUP_BATCH = 1024  # documents hashed together: numpy work per call, bounded memory
NEAR_DEDUP_BATCH_CHARS = 1 << 20  # ... or fewer, when they are long
SHINGLE_ROWS_PER_CHUNK = 8192  # hashed together: a (permutations, shingles) uint64 block, 8 MiB


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
class NearDedupConfig:
    """MinHash over word n-gram shingles, with LSH bands chosen for the Jaccard threshold."""

    threshold: float = 0.8
    shingle_words: int = 5
    num_permutations: int = 128
    seed: int = 0

    def __post_init__(self):
        if not 0 < self.threshold < 1:
            raise ValueError(f"near-dedup threshold must be in (0, 1), got {self.threshold}")
        if self.shingle_words < 1 or self.num_permutations < 2:
            raise ValueError("near-dedup needs shingle_words >= 1 and num_permutations >= 2")


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


# ---------------------------------------------------------------- near-duplicates


def lsh_bands(threshold: float, num_permutations: int) -> tuple[int, int]:
    """(bands, rows per band) whose S-curve 1 - (1 - s**rows)**bands best separates Jaccard
    similarity s around `threshold`: the least false-positive area below it plus
    false-negative area above it (Leskovec, Rajaraman & Ullman, Mining of Massive Datasets,
    ch. 3.4)."""
    s = np.linspace(0, 1, 1001)
    below = s < threshold
    best = (np.inf, 1, num_permutations)
    for bands in range(1, num_permutations + 1):
        for rows in range(1, num_permutations // bands + 1):
            caught = 1 - (1 - s**rows) ** bands
            error = caught[below].sum() + (1 - caught[~below]).sum()
            best = min(best, (error, bands, rows))
    return best[1], best[2]


class MinHasher:
    """MinHash signatures of word n-gram sets, many documents at a time in numpy.

    Each permutation is a multiply-add-shift hash of a 32-bit shingle id, h(x) = (a·x + b) >> 32
    with random 64-bit a and b (Dietzfelbinger 1996): 2-universal, and numpy's uint64 product
    wraps modulo 2**64, which is exactly the arithmetic it needs.
    """

    def __init__(self, shingle_words: int = 5, num_permutations: int = 128, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.shingle_words = shingle_words
        self.a = rng.integers(0, 2**64, size=num_permutations, dtype=np.uint64) | np.uint64(1)
        self.b = rng.integers(0, 2**64, size=num_permutations, dtype=np.uint64)

    def shingles(self, text: str) -> np.ndarray:
        """32-bit ids (uint64) of the word n-grams; a shorter document is one shingle."""
        words = text.split()
        ids = np.fromiter(map(zlib.crc32, map(str.encode, words)), dtype=np.uint64,
                          count=len(words))
        n = min(self.shingle_words, max(len(words), 1))
        combined = np.zeros(max(len(words) - n + 1, 1), dtype=np.uint64)
        for k in range(n if len(words) else 0):
            # A polynomial in the word ids with an odd 64-bit base, multiplied after each add
            # so that every word reaches the top 32 bits, which are the best mixed: the id.
            combined = (combined + ids[k: k + combined.size]) * np.uint64(0x9E3779B97F4A7C15)
        return combined >> np.uint64(32)

    def signatures(self, texts: list[str]) -> np.ndarray:
        """(documents, permutations) uint32: the minimum hash of each document's shingles."""
        shingle_sets = [self.shingles(text) for text in texts]
        if not texts:
            return np.empty((0, self.a.size), dtype=np.uint32)
        shingles = np.concatenate(shingle_sets)
        owners = np.repeat(np.arange(len(texts)), [s.size for s in shingle_sets])
        minimum = np.full((self.a.size, len(texts)), np.iinfo(np.uint64).max, dtype=np.uint64)
        # A window of shingles at a time, however long the documents: memory stays bounded.
        for start in range(0, shingles.size, SHINGLE_ROWS_PER_CHUNK):
            window = slice(start, start + SHINGLE_ROWS_PER_CHUNK)
            hashed = np.multiply.outer(self.a, shingles[window])  # (P, S): runs contiguous
            hashed += self.b[:, None]
            owner = owners[window]
            firsts = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]])
            documents = owner[firsts]
            minimum[:, documents] = np.minimum(minimum[:, documents],
                                               np.minimum.reduceat(hashed, firsts, axis=1))
        # The shift is monotone, so it commutes with the minimum: shift P values per document
        # rather than P per shingle.
        return np.ascontiguousarray((minimum >> np.uint64(32)).astype(np.uint32).T)


class NearDeduplicator:
    """Keeps a document unless it shares an LSH band with a document already kept.

    Memory is one 8-byte key per band per kept document; candidates are not re-checked
    against their exact similarity, so the threshold is the S-curve's soft edge, not a cut.
    """

    def __init__(self, config: NearDedupConfig = NearDedupConfig()):
        self.hasher = MinHasher(config.shingle_words, config.num_permutations, config.seed)
        self.bands, self.rows = lsh_bands(config.threshold, config.num_permutations)
        self.seen: list[set[bytes]] = [set() for _ in range(self.bands)]

    def keep(self, texts: list[str]) -> np.ndarray:
        """A bool per document, in order: True where it is not a near-duplicate."""
        signatures = self.hasher.signatures(texts)
        keep = np.ones(len(texts), dtype=bool)
        for index, signature in enumerate(signatures):
            keys = [hashlib.blake2b(band.tobytes(), digest_size=8).digest() for band in
                    signature[: self.bands * self.rows].reshape(self.bands, self.rows)]
            if any(key in seen for key, seen in zip(keys, self.seen, strict=True)):
                keep[index] = False
                continue
            for key, seen in zip(keys, self.seen, strict=True):
                seen.add(key)
        return keep


# ---------------------------------------------------------------- the pipeline


def clean(documents: Iterable[str], config: CleaningConfig = CleaningConfig(),
          report: CleaningReport | None = None) -> Iterator[str]:
    """Stream the cleaned documents, counting into `report`.

    Raises DataError at the end if nothing is left: training on nothing is never intended.
    """
    report = CleaningReport() if report is None else report
    digests: set[bytes] | None = set() if config.exact_dedup else None
    near = NearDeduplicator(config.near_dedup) if config.near_dedup else None
    pending: list[str] = []
    pending_chars = 0

    def flush() -> Iterator[str]:
        for text, kept in zip(pending, near.keep(pending), strict=True):
            report.near_duplicates += not kept
            report.documents_out += bool(kept)
            if kept:
                yield text
        pending.clear()

    for text in documents:
        report.documents_in += 1
        normalised = normalise(text, config.normalisation)
        report.normalised_changed += normalised != text
        if config.strip_control:
            stripped = strip_control(normalised)
            report.control_stripped += stripped != normalised
            normalised = stripped
        text = normalised.strip()
        if not text:
            report.empty += 1
            continue
        if digests is not None:
            digest = document_digest(text)
            if digest in digests:
                report.exact_duplicates += 1
                continue
            digests.add(digest)
        if config.quality is not None:
            rejection = quality_rejection(text, config.quality)
            if rejection:
                report.quality_rejected[rejection] += 1
                continue
        if near is None:
            report.documents_out += 1
            yield text
            continue
        pending.append(text)
        pending_chars += len(text)
        if len(pending) == NEAR_DEDUP_BATCH or pending_chars >= NEAR_DEDUP_BATCH_CHARS:
            yield from flush()
            pending_chars = 0
    if pending:
        yield from flush()
    if report.documents_out == 0:
        steps = ", ".join(f"{row['step']} {row['in']}→{row['out']}" for row in report.steps())
        raise DataError(f"no documents left after cleaning ({report.documents_in} in; {steps})")
