"""Near-duplicate detection: MinHash signatures of word n-gram shingles, and LSH bands that
flag a document as a near-duplicate of one already kept.
"""

from __future__ import annotations

import hashlib
import zlib
from dataclasses import dataclass

import numpy as np

SHINGLE_ROWS_PER_CHUNK = 8192  # hashed together: a (permutations, shingles) uint64 block, 8 MiB


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
        return self.keep_keys(self.band_keys(texts))

    def band_keys(self, texts: list[str]) -> list[list[bytes]]:
        """Each document's LSH band keys: the work that needs no other document, so that
        processes can share it (keep_keys then decides in order)."""
        return [[hashlib.blake2b(band.tobytes(), digest_size=8).digest() for band in
                 signature[: self.bands * self.rows].reshape(self.bands, self.rows)]
                for signature in self.hasher.signatures(texts)]

    def keep_keys(self, band_keys: list[list[bytes]]) -> np.ndarray:
        """`keep` from the documents' band keys."""
        keep = np.ones(len(band_keys), dtype=bool)
        for index, keys in enumerate(band_keys):
            if any(key in seen for key, seen in zip(keys, self.seen, strict=True)):
                keep[index] = False
                continue
            for key, seen in zip(keys, self.seen, strict=True):
                seen.add(key)
        return keep
