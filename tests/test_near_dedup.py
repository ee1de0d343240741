"""MinHash against the exact Jaccard similarity, LSH bands, near-duplicate detection."""

import numpy as np
import pytest

from lmlab.data.preparation import near_dedup
from lmlab.data.preparation.near_dedup import (
    MinHasher,
    NearDedupConfig,
    NearDeduplicator,
    lsh_bands,
)
from tests.test_cleaning import words


def exact_jaccard(a: str, b: str, n: int = 5) -> float:
    """The definition: |A ∩ B| / |A ∪ B| over sets of word n-grams."""
    grams = [{tuple(t.split()[i:i + n]) for i in range(len(t.split()) - n + 1)} for t in (a, b)]
    return len(grams[0] & grams[1]) / len(grams[0] | grams[1])


def test_minhash_estimates_exact_jaccard():
    rng = np.random.default_rng(1)
    hasher = MinHasher(shingle_words=5, num_permutations=128, seed=3)
    errors = []
    for pair in range(80):
        base = words(pair * 200, 150).split()
        variant = list(base)
        for position in rng.choice(150, size=int(rng.integers(0, 40)), replace=False):
            variant[position] = f"changed{position}"
        a, b = " ".join(base), " ".join(variant)
        ids = [set(hasher.shingles(text).tolist()) for text in (a, b)]
        assert len(ids[0] & ids[1]) / len(ids[0] | ids[1]) == exact_jaccard(a, b)  # no clashes
        signatures = hasher.signatures([a, b])
        estimate = float(np.mean(signatures[0] == signatures[1]))
        errors.append(estimate - exact_jaccard(a, b))
    errors = np.abs(errors)
    # One estimate has standard deviation sqrt(J(1-J)/128) <= 0.044.
    assert errors.max() < 0.15 and errors.mean() < 0.04


def test_signatures_do_not_depend_on_how_documents_are_chunked(monkeypatch):
    texts = [words(i * 50, 10 + i) for i in range(30)] + ["", "one two"]
    together = MinHasher().signatures(texts)
    monkeypatch.setattr(near_dedup, "SHINGLE_ROWS_PER_CHUNK", 7)
    assert np.array_equal(MinHasher().signatures(texts), together)
    assert np.array_equal(MinHasher().signatures(texts[3:4])[0], together[3])


@pytest.mark.parametrize("threshold", [0.5, 0.7, 0.8, 0.9])
def test_lsh_bands_put_the_s_curve_edge_near_the_threshold(threshold):
    bands, rows = lsh_bands(threshold, 128)
    assert bands * rows <= 128
    assert abs((1 / bands) ** (1 / rows) - threshold) < 0.08


def test_one_changed_word_is_a_near_duplicate_and_an_unrelated_text_is_not():
    base = words(0, 200)
    one_word = base.replace(base.split()[100], "CHANGED", 1)
    reordered = " ".join(base.split()[100:] + base.split()[:100])
    unrelated = words(5000, 200)
    assert exact_jaccard(base, one_word) > 0.9
    dedup = NearDeduplicator(NearDedupConfig(threshold=0.8))
    assert dedup.keep([base, one_word, unrelated, reordered]).tolist() == [True, False, True,
                                                                           False]
    assert dedup.keep([words(9000, 200), base]).tolist() == [True, False]  # across calls
