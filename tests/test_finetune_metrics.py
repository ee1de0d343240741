"""Fine-tuning metrics against hand-computed values: accuracy, macro F1 and Matthews
correlation; Pearson and Spearman; SQuAD normalisation, exact match and token F1 (v2's
unanswerable questions too); strict IOB2 entity spans and exact-span entity F1; and the
per-example values paired comparisons resample, which average to each metric."""

import math

import numpy as np
import pytest

from lmlab.tasks.metrics import (
    classification_metrics,
    confusion_matrix,
    entity_f1_items,
    entity_metrics,
    entity_spans,
    linearized_ratio,
    normalize_answer,
    pearson_items,
    regression_metrics,
    squad_exact_match,
    squad_f1,
    squad_metrics,
)

# 3 classes; gold 0 -> predicted 0, 0, 1; gold 1 -> 1, 2; gold 2 -> 2, 2, 0
GOLD_3 = [0, 0, 0, 1, 1, 2, 2, 2]
PREDICTED_3 = [0, 0, 1, 1, 2, 2, 2, 0]


def test_confusion_matrix_rows_are_gold_columns_predicted():
    # counted off GOLD_3 / PREDICTED_3 pair by pair
    expected = [[2, 1, 0],
                [0, 1, 1],
                [1, 0, 2]]
    counts = confusion_matrix(GOLD_3, PREDICTED_3, 3)
    assert counts.dtype == np.int64
    assert counts.tolist() == expected


def test_confusion_matrix_rejects_labels_out_of_range():
    with pytest.raises(ValueError, match=r"\[0, 2\)"):
        confusion_matrix([0, 2], [0, 1], 2)
    with pytest.raises(ValueError):
        confusion_matrix([0, 1], [0], 2)


def test_three_class_accuracy_macro_f1_and_mcc():
    metrics = classification_metrics(GOLD_3, PREDICTED_3, 3)
    # accuracy: diagonal 2 + 1 + 2 = 5 of 8
    assert metrics["accuracy"] == pytest.approx(5 / 8)
    # class 0: TP 2, FP 1 (column 3 - 2), FN 1 (row 3 - 2): P = R = 2/3, F1 = 2/3
    # class 1: TP 1, FP 1, FN 1: F1 = 1/2;  class 2: TP 2, FP 1, FN 1: F1 = 2/3
    # macro F1 = (2/3 + 1/2 + 2/3) / 3 = 11/18
    assert metrics["macro_f1"] == pytest.approx(11 / 18)
    # Gorodkin: c = 5 correct, s = 8, gold totals t = predicted totals p = (3, 2, 3)
    # (c*s - p.t) / sqrt((s^2 - p.p)(s^2 - t.t)) = (40 - 22) / sqrt(42 * 42) = 3/7
    assert metrics["mcc"] == pytest.approx(3 / 7)


def test_macro_f1_leaves_out_a_label_absent_from_gold_and_predicted():
    # label 3 never occurs: the same three per-label F1s as above, mean 11/18 (not 11/24)
    assert classification_metrics(GOLD_3, PREDICTED_3, 4)["macro_f1"] == pytest.approx(11 / 18)
    # label 2 only predicted: per-label F1 1 (label 0), 0 (label 1: 0 of 2 right), 0 (label 2),
    # mean 1/3
    assert classification_metrics([0, 1, 1], [0, 2, 2], 3)["macro_f1"] == pytest.approx(1 / 3)


def test_binary_mcc_matches_the_two_by_two_formula():
    gold = [1, 1, 1, 1, 0, 0, 0, 0, 0, 0]
    predicted = [1, 1, 1, 0, 1, 1, 0, 0, 0, 0]
    # TP 3, FN 1, FP 2, TN 4: (TP*TN - FP*FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN))
    # = (12 - 2) / sqrt(5 * 4 * 6 * 5) = 10 / sqrt(600) = 1/sqrt(6)
    # the multi-class form: c = 7, s = 10, t = (6, 4), p = (5, 5):
    # (70 - 50) / sqrt((100 - 50)(100 - 52)) = 20 / sqrt(2400) = 1/sqrt(6) as well
    metrics = classification_metrics(gold, predicted, 2)
    assert metrics["mcc"] == pytest.approx(1 / math.sqrt(6))
    assert metrics["accuracy"] == pytest.approx(7 / 10)


def test_mcc_extremes():
    # perfect: c = s, so numerator = s^2 - p.t = s^2 - t.t = denominator
    assert classification_metrics([0, 1, 2, 1], [0, 1, 2, 1], 3)["mcc"] == pytest.approx(1.0)
    # inverse binary: TP = TN = 0, FP = FN = 2: (0 - 4) / sqrt(2 * 2 * 2 * 2) = -1
    assert classification_metrics([0, 1, 0, 1], [1, 0, 1, 0], 2)["mcc"] == pytest.approx(-1.0)
    # constant prediction: p.p = s^2, the denominator is 0, so 0.0 (accuracy still 3 of 5)
    constant = classification_metrics([0, 1, 1, 0, 1], [1, 1, 1, 1, 1], 2)
    assert constant["mcc"] == 0.0
    assert constant["accuracy"] == pytest.approx(3 / 5)


def test_pearson_and_spearman_by_hand():
    # x = (1, 2, 3), y = (1, 3, 2): deviations (-1, 0, 1), (-1, 1, 0): r = 1 / sqrt(2 * 2) = 1/2;
    # the values are their own ranks, so Spearman is 1/2 too
    metrics = regression_metrics([1, 2, 3], [1, 3, 2])
    assert metrics["pearson"] == pytest.approx(0.5)
    assert metrics["spearman"] == pytest.approx(0.5)
    # squared errors 0, 1, 1: mean 2/3
    assert metrics["mse"] == pytest.approx(2 / 3)


def test_spearman_gives_ties_their_mean_rank():
    # ranks x = (1, 2.5, 2.5, 4), y = (1, 3, 2, 4); deviations from 2.5: (-1.5, 0, 0, 1.5) and
    # (-1.5, .5, -.5, 1.5): rho = 4.5 / sqrt(4.5 * 5) = sqrt(0.9)
    assert regression_metrics([1, 2, 2, 3], [1, 3, 2, 4])["spearman"] == pytest.approx(
        math.sqrt(0.9))


def test_monotone_non_linear_relation():
    gold = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    predicted = gold**3  # same order, not a line
    metrics = regression_metrics(gold, predicted)
    assert metrics["spearman"] == pytest.approx(1.0)
    assert metrics["pearson"] < 0.99
    assert metrics["pearson"] == pytest.approx(np.corrcoef(gold, predicted)[0, 1])
    # reversed order: both correlations -1
    reversed_metrics = regression_metrics(gold, -gold)
    assert reversed_metrics["pearson"] == pytest.approx(-1.0)
    assert reversed_metrics["spearman"] == pytest.approx(-1.0)


def test_constant_side_gives_zero_not_nan():
    # 0.1 three times: a mean that is not exactly 0.1 must not make a spurious correlation
    for gold, predicted in (([1, 2, 3], [2, 2, 2]), ([0.1, 0.1, 0.1], [1, 2, 3])):
        metrics = regression_metrics(gold, predicted)
        assert metrics["pearson"] == 0.0
        assert metrics["spearman"] == 0.0
    # squared errors 1, 0, 1: mean 2/3
    assert regression_metrics([1, 2, 3], [2, 2, 2])["mse"] == pytest.approx(2 / 3)


def test_regression_agrees_with_scipy_on_random_data():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(0)
    gold = rng.integers(0, 6, size=50).astype(float)  # many ties
    predicted = gold + rng.normal(size=50)
    metrics = regression_metrics(gold, predicted)
    assert metrics["pearson"] == pytest.approx(stats.pearsonr(gold, predicted)[0])
    assert metrics["spearman"] == pytest.approx(stats.spearmanr(gold, predicted)[0])


@pytest.mark.parametrize(("text", "expected"), [
    ("The  Cat!", "cat"),  # lowercase, "!" dropped, article dropped, spaces collapsed
    ("an apple", "apple"),
    ("A.B", "ab"),  # punctuation goes before articles, so "a.b" becomes the word "ab"
    ("the theater", "theater"),  # "the" inside a word is kept
    ("  Anne's   bandana ", "annes bandana"),  # "an" / "a" inside words kept
])
def test_normalize_answer(text, expected):
    assert normalize_answer(text) == expected


def test_exact_match_takes_the_best_gold():
    # "paris." normalises to "paris", equal to the prediction's "paris"
    assert squad_exact_match("Paris", ["London", "paris."]) == 1.0
    assert squad_exact_match("Paris, France", ["London", "paris."]) == 0.0


def test_f1_partial_overlap():
    # [big, red, dog] against [red, dog, barked]: 2 in common, P = R = 2/3, F1 = 2/3
    assert squad_f1("the big red dog", ["red dog barked"]) == pytest.approx(2 / 3)
    # the best of 0 ("barked" shares nothing) and 2/3
    assert squad_f1("the big red dog", ["barked", "red dog barked"]) == pytest.approx(2 / 3)


def test_f1_counts_repeated_tokens_with_multiplicity():
    # [dog, dog, dog] against [dog]: 1 in common, P = 1/3, R = 1: F1 = (2/3) / (4/3) = 1/2
    assert squad_f1("dog dog dog", ["dog"]) == pytest.approx(0.5)
    # [dog, dog] against [dog, dog, cat]: 2 in common, P = 1, R = 2/3: F1 = (4/3) / (5/3) = 4/5
    assert squad_f1("dog dog", ["dog dog cat"]) == pytest.approx(0.8)


def test_f1_with_no_tokens_on_a_side():
    # "the" and "a" both normalise to "": 1.0; "the" against "cat": 0.0
    assert squad_f1("the", ["a"]) == 1.0
    assert squad_f1("the", ["cat"]) == 0.0


def test_unanswerable_questions_expect_the_empty_answer():
    assert squad_exact_match("", []) == 1.0
    assert squad_f1("", []) == 1.0
    assert squad_exact_match("Paris", []) == 0.0
    assert squad_f1("Paris", []) == 0.0


def test_squad_metrics_average_over_questions_as_percentages():
    predictions = ["Paris", "the big red dog", "", "something"]
    golds = [["paris"], ["red dog barked"], [], []]
    metrics = squad_metrics(predictions, golds)
    # EM per question 1, 0, 1, 0: 50%; F1 1, 2/3, 1, 0: (8/3) / 4 = 2/3, 66.67%
    assert metrics["exact_match"] == pytest.approx(50.0)
    assert metrics["f1"] == pytest.approx(200 / 3)
    with pytest.raises(ValueError):
        squad_metrics(["a"], [])


@pytest.mark.parametrize(("tags", "expected"), [
    (["B-PER", "I-PER", "O", "B-LOC"], [("PER", 0, 2), ("LOC", 3, 4)]),
    (["I-PER", "I-PER", "O"], []),  # I- at the start opens nothing, nor does the next I-
    (["O", "I-PER"], []),  # I- after O
    (["B-PER", "I-LOC", "I-LOC"], [("PER", 0, 1)]),  # I-LOC does not continue a PER
    (["B-PER", "B-PER"], [("PER", 0, 1), ("PER", 1, 2)]),  # adjacent entities stay apart
    (["B-ORG", "I-ORG", "I-ORG"], [("ORG", 0, 3)]),  # an entity running to the end
])
def test_entity_spans_strict_iob2(tags, expected):
    assert entity_spans(tags) == expected


@pytest.mark.parametrize("tag", ["PER", "X-PER", "B-", "o", "B_PER"])
def test_entity_spans_rejects_other_tags(tag):
    with pytest.raises(ValueError, match=repr(tag)):
        entity_spans(["O", tag])


GOLD_TAGS = [["B-PER", "I-PER", "O", "B-LOC"],
             ["B-PER", "I-PER", "O"],
             ["B-LOC", "B-LOC"]]
PREDICTED_TAGS = [["B-PER", "I-PER", "O", "B-ORG"],  # LOC predicted as ORG: an FP and an FN
                  ["O", "I-PER", "O"],  # no B-: no predicted entity, the PER is missed
                  ["B-LOC", "B-LOC"]]  # both adjacent LOCs right


def test_entity_metrics_micro_average():
    metrics = entity_metrics(GOLD_TAGS, PREDICTED_TAGS)
    # gold entities 2 + 1 + 2 = 5, predicted 2 + 0 + 2 = 4, right 1 (PER) + 0 + 2 = 3
    # P = 3/4, R = 3/5, F1 = 2 * .75 * .6 / 1.35 = 2/3
    assert metrics["precision"] == pytest.approx(3 / 4)
    assert metrics["recall"] == pytest.approx(3 / 5)
    assert metrics["f1"] == pytest.approx(2 / 3)
    # equal tags: 3 of 4 (the last differs), 2 of 3 (the first differs), 2 of 2: 7 of 9
    assert metrics["token_accuracy"] == pytest.approx(7 / 9)


def test_entity_metrics_per_type():
    per_type = entity_metrics(GOLD_TAGS, PREDICTED_TAGS)["per_type"]
    assert set(per_type) == {"PER", "LOC", "ORG"}
    # PER: gold 2, predicted 1, right 1: P 1, R 1/2, F1 2/3
    assert per_type["PER"] == pytest.approx(
        {"precision": 1.0, "recall": 0.5, "f1": 2 / 3, "support": 2})
    # LOC: gold 3, predicted 2, right 2: P 1, R 2/3, F1 = (4/3) / (5/3) = 4/5
    assert per_type["LOC"] == pytest.approx(
        {"precision": 1.0, "recall": 2 / 3, "f1": 0.8, "support": 3})
    # ORG: only predicted, never right; recall's denominator is 0, so 0.0
    assert per_type["ORG"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 0}


def test_entity_needs_exact_boundaries():
    # predicted PER over word 0 only, gold over words 0-1: no match, P = R = F1 = 0
    metrics = entity_metrics([["B-PER", "I-PER"]], [["B-PER", "O"]])
    assert (metrics["precision"], metrics["recall"], metrics["f1"]) == (0.0, 0.0, 0.0)
    assert metrics["token_accuracy"] == pytest.approx(1 / 2)


def test_entity_metrics_with_nothing_to_count():
    metrics = entity_metrics([["O", "O"]], [["O", "O"]])
    assert (metrics["precision"], metrics["recall"], metrics["f1"]) == (0.0, 0.0, 0.0)
    assert metrics["token_accuracy"] == 1.0
    assert metrics["per_type"] == {}


def test_entity_metrics_rejects_mismatched_sentences_and_bad_tags():
    with pytest.raises(ValueError, match="sentence 1"):
        entity_metrics([["O"], ["O", "O"]], [["O"], ["O"]])
    with pytest.raises(ValueError):
        entity_metrics([["O"], ["O"]], [["O"]])
    with pytest.raises(ValueError, match="'MISC'"):
        entity_metrics([["O", "MISC"]], [["O", "O"]])


# --- per-example scores for paired comparisons --------------------------------------------


def test_per_example_scores_average_to_the_metric():
    rng = np.random.default_rng(0)
    gold = rng.normal(size=200)
    predicted = gold + rng.normal(scale=0.8, size=200)
    assert pearson_items(gold, predicted).mean() == pytest.approx(
        regression_metrics(gold, predicted)["pearson"], abs=1e-12)
    gold_tags = [["B-PER", "I-PER", "O"], ["O", "B-LOC"], ["B-ORG", "O", "B-PER"], ["O"]]
    predicted_tags = [["B-PER", "I-PER", "O"], ["B-LOC", "O"], ["B-ORG", "O", "O"], ["B-X"]]
    items = entity_f1_items(gold_tags, predicted_tags)
    assert len(items) == 4
    assert items.mean() == pytest.approx(entity_metrics(gold_tags, predicted_tags)["f1"])
    # by hand: correct 2 (PER, ORG) of gold 4 and predicted 4 → F1 = 2·2 / 8 = 0.5
    assert items.mean() == pytest.approx(0.5)
    assert linearized_ratio([0, 0], [0, 0]).tolist() == [0.0, 0.0]
    assert pearson_items([1, 1, 1], [1, 2, 3]).tolist() == [0.0, 0.0, 0.0]


def test_linearised_values_carry_the_ratios_sampling_variance():
    # the spread of the linearised values matches a bootstrap of the ratio itself
    rng = np.random.default_rng(1)
    numerators = rng.poisson(3, size=400).astype(float)
    denominators = numerators + rng.poisson(4, size=400)
    items = linearized_ratio(numerators, denominators)
    assert items.mean() == pytest.approx(numerators.sum() / denominators.sum())
    draws = rng.integers(0, 400, size=(4000, 400))
    bootstrap = numerators[draws].sum(axis=1) / denominators[draws].sum(axis=1)
    assert items.std() / np.sqrt(400) == pytest.approx(bootstrap.std(), rel=0.1)
