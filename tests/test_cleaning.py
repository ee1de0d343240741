"""Cleaning steps against hand-made cases and brute-force definitions; the hashed split."""

from dataclasses import fields, replace

import numpy as np
import pytest

from lmlab.data.errors import DataError
from lmlab.data.preparation import cleaning
from lmlab.data.preparation.cleaning import (
    CleaningConfig,
    CleaningReport,
    QualityThresholds,
    clean,
    normalise,
    quality_rejection,
    split_of,
    strip_control,
)

GOOD = (
    "The library opened early on Saturday, and a small crowd had already gathered by the "
    "doors. Most of them were students preparing for examinations, carrying thick folders "
    "and cups of coffee. An elderly man asked the librarian where he could find old maps of "
    "the river valley, because his grandfather had once farmed there. She walked him to the "
    "back room, where the drawers smelled of dust and paper, and showed him how the sheets "
    "were numbered by year."
)
SENTENCES = [s.strip() + "." for s in GOOD.split(".") if s.strip()]
RNG_WORDS = np.random.default_rng(0).choice(
    [f"w{i}x" for i in range(5000)], size=20_000).tolist()


def words(start, count):
    """Distinct-looking random words, reproducible."""
    return " ".join(RNG_WORDS[start:start + count])


NO_DEDUP = CleaningConfig(exact_dedup=False, near_dedup=None)


# ---------------------------------------------------------------- rewriting steps


def test_normalisation_forms():
    decomposed = "cafe\u0301 \ufb01"  # e + combining acute; the "fi" ligature
    assert normalise(decomposed) == "caf\u00e9 \ufb01"
    assert normalise(decomposed, "NFKC") == "caf\u00e9 fi"
    assert normalise(decomposed, "none") == decomposed
    with pytest.raises(ValueError, match="normalisation must be one of NFC, NFKC, none"):
        CleaningConfig(normalisation="NFD")


def test_control_characters_go_but_tabs_and_newlines_stay():
    assert strip_control("a\tb\x00c\x07\r\nd\re\x85f\x7f") == "a\tbc\nd\nef"


def test_clean_counts_each_step_and_dedups_on_the_normalised_text():
    docs = ["caf\u00e9 time", "cafe\u0301 time", "  \x00 ", "tab\x07 here", "other"]
    report = CleaningReport()
    assert list(clean(docs, NO_DEDUP, report)) == ["caf\u00e9 time", "caf\u00e9 time",
                                                    "tab here", "other"]
    assert (report.normalised_changed, report.control_stripped, report.empty) == (1, 2, 1)
    report = CleaningReport()
    assert list(clean(docs, CleaningConfig(near_dedup=None), report)) == \
        ["caf\u00e9 time", "tab here", "other"]
    assert report.exact_duplicates == 1 and report.documents_out == 3
    assert report.steps()[:2] == [{"step": "empty", "in": 5, "out": 4},
                                  {"step": "exact_dedup", "in": 4, "out": 3}]
    assert report.as_dict()["documents_in"] == 5


def test_nothing_left_after_cleaning_is_a_one_line_error():
    with pytest.raises(DataError, match="no documents left after cleaning") as caught:
        list(clean(["   ", "\x00"]))
    assert "\n" not in str(caught.value) and "empty 2→0" in str(caught.value)


# ---------------------------------------------------------------- near-duplicates in the pipeline


def test_near_dedup_in_the_pipeline_across_batches(monkeypatch):
    monkeypatch.setattr(cleaning, "NEAR_DEDUP_BATCH", 3)
    docs = [words(i * 300, 120) for i in range(10)]
    near = [d.replace(d.split()[60], "CHANGED", 1) for d in docs[:4]]
    report = CleaningReport()
    assert list(clean(docs + near, report=report)) == docs
    assert report.near_duplicates == 4 and report.steps()[-1] == {"step": "near_dedup",
                                                                   "in": 14, "out": 10}


# ---------------------------------------------------------------- Gopher quality rules


def lines(sentences, prefix="", suffix=""):
    return "\n".join(prefix + s + suffix for s in sentences)


REPEATED = "the quick brown fox jumps over the lazy sleeping dog"
BAD = {  # rule -> (threshold field, a document that breaks it)
    "word_count": ("min_words", "Far too short to count as a document."),
    "mean_word_length": ("min_mean_word_length", "it is an ox " * 20),
    "symbol_word_ratio": ("max_symbol_word_ratio", GOOD + " #tag" * 12),
    "alphabetic_words": ("min_alphabetic_word_fraction", GOOD + " 12345" * 30),
    "bullet_lines": ("max_bullet_line_fraction", lines(SENTENCES, prefix="• ")),
    "ellipsis_lines": ("max_ellipsis_line_fraction", lines(SENTENCES, suffix="..")),
    "duplicate_lines": ("max_duplicate_line_fraction", lines(SENTENCES + SENTENCES[:2])),
    "duplicate_line_chars": ("max_duplicate_line_char_fraction",
                             lines(SENTENCES + SENTENCES[2:3])),
    "duplicate_paragraphs": ("max_duplicate_paragraph_fraction",
                             "\n\n".join(SENTENCES[:2] * 2 + SENTENCES[2:4])),
    "duplicate_paragraph_chars": ("max_duplicate_paragraph_char_fraction",
                                  "\n\n".join([*SENTENCES, SENTENCES[2]])),
    "top_2gram_chars": ("max_top_ngram_char_fraction",
                        " ".join(f"{w} wonderful elephants" for w in words(0, 12).split())),
    "duplicate_10gram_chars": ("max_duplicate_ngram_char_fraction",
                               f"{words(0, 20)} {REPEATED} {words(20, 10)} {REPEATED}"),
}
DEFAULT = QualityThresholds()
# Every rule switched off, so that a case tests its own rule only.
RELAXED = QualityThresholds(
    min_words=0, max_words=10**9, min_mean_word_length=0, max_mean_word_length=1e9,
    max_symbol_word_ratio=1e9, min_alphabetic_word_fraction=0, max_bullet_line_fraction=1,
    max_ellipsis_line_fraction=1, max_duplicate_line_fraction=1,
    max_duplicate_line_char_fraction=1, max_duplicate_paragraph_fraction=1,
    max_duplicate_paragraph_char_fraction=1, max_top_ngram_char_fraction=(),
    max_duplicate_ngram_char_fraction=())


@pytest.mark.parametrize("rule", BAD)
def test_each_rule_rejects_its_bad_document_and_keeps_good_prose(rule):
    field, bad = BAD[rule]
    only = replace(RELAXED, **{field: getattr(DEFAULT, field)})
    if rule == "duplicate_10gram_chars":
        only = replace(only, max_duplicate_ngram_char_fraction=((10, 0.10),))
    assert quality_rejection(bad, only) == rule
    assert quality_rejection(GOOD, only) is None


def test_the_rules_cover_every_threshold_and_good_prose_passes_them_all():
    tested = {field for field, _ in BAD.values()}
    assert tested | {"max_words", "max_mean_word_length"} == {f.name for f in fields(DEFAULT)}
    assert quality_rejection(GOOD, DEFAULT) is None
    assert quality_rejection("word " * 200_000, DEFAULT) == "word_count"
    assert quality_rejection("incomprehensibilities " * 60, RELAXED) is None
    assert quality_rejection(" ".join(["incomprehensibilities"] * 60),
                             replace(RELAXED, max_mean_word_length=10)) == "mean_word_length"


def test_quality_rejections_are_counted_by_rule():
    report = CleaningReport()
    docs = [GOOD, BAD["bullet_lines"][1], BAD["word_count"][1], "Tiny."]
    config = CleaningConfig(near_dedup=None, quality=DEFAULT)
    assert list(clean(docs, config, report)) == [GOOD]
    assert report.quality_rejected == {"bullet_lines": 1, "word_count": 2}


# ---------------------------------------------------------------- train/validation split


def test_the_split_is_deterministic_and_meets_the_fraction():
    docs = [f"document number {i}" for i in range(20_000)]
    splits = [split_of(d, 0.1) for d in docs]
    assert splits == [split_of(d, 0.1) for d in docs]
    assert splits.count("validation") / len(docs) == pytest.approx(0.1, abs=0.01)
    assert {split_of(d, 0.0) for d in docs[:100]} == {"train"}
    # Raising the fraction only moves documents into validation.
    wider = [split_of(d, 0.2) for d in docs]
    assert all(w == "validation" for s, w in zip(splits, wider, strict=True) if s == "validation")
    with pytest.raises(ValueError, match="validation fraction"):
        split_of("x", 1.0)
