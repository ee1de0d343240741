import numpy as np
import pytest

from lmlab.compare.stats import (
    NO_DIFFERENCE,
    Difference,
    _t_quantile,
    holm,
    paired_bootstrap,
    verdicts,
)

TRIALS = 300
RESAMPLES = 400
SEEDS_DOMINATE = dict(seed_sd=0.3, finetune_sd=0.05, noise_sd=1.0)
BOTH_LEVELS = dict(seed_sd=0.05, finetune_sd=0.05, noise_sd=1.0)


def simulate(rng: np.random.Generator, delta: float = 0.0, shape=(3, 3, 200), seed_sd=0.05,
             finetune_sd=0.05, noise_sd=1.0, objective_item_sd=0.05):
    """Scores of A and B from one hierarchical distribution; A's are shifted up by `delta`.

    Paired seeds share a data-order effect and paired items share a difficulty; each
    objective also has its own seed, fine-tuning seed and item effects, and per-run noise.
    """
    seeds, finetunes, items = shape
    data_order = rng.normal(0, 0.5, (seeds, 1, 1))
    difficulty = rng.normal(0, 1.0, (1, 1, items))

    def one_objective():
        return (data_order + difficulty + rng.normal(0, seed_sd, (seeds, 1, 1))
                + rng.normal(0, finetune_sd, (seeds, finetunes, 1))
                + rng.normal(0, objective_item_sd, (1, 1, items))
                + rng.normal(0, noise_sd, shape))

    return one_objective() + delta, one_objective()


def verdict(difference: Difference) -> str:
    return verdicts({"measure": difference})[0].says


def trials(delta: float = 0.0, count: int = TRIALS, seed: int = 1234,
           **design) -> list[Difference]:
    rng = np.random.default_rng(seed)
    return [paired_bootstrap(*simulate(rng, delta, **design), resamples=RESAMPLES, seed=i)
            for i in range(count)]


@pytest.mark.parametrize("design", [SEEDS_DOMINATE, BOTH_LEVELS], ids=["seeds", "both"])
def test_no_difference_is_reported_about_95_percent_of_the_time_under_the_null(design):
    quiet = np.mean([verdict(d) == NO_DIFFERENCE for d in trials(**design)])
    assert 0.90 <= quiet <= 0.99


def test_interval_covers_a_planted_difference_about_95_percent_of_the_time():
    # Other draws and design than the null test's: a shifted copy of it would add nothing.
    delta = 0.2
    found = trials(delta, seed=99, shape=(5, 2, 300), seed_sd=0.1, finetune_sd=0.05)
    covered = np.mean([d.low <= delta <= d.high for d in found])
    assert 0.88 <= covered <= 0.99


def test_standard_error_matches_the_spread_of_estimates():
    found = trials(**SEEDS_DOMINATE)
    spread = np.std([d.estimate for d in found])
    typical_error = np.sqrt(np.mean([d.standard_error**2 for d in found]))
    assert 0.8 <= typical_error / spread <= 1.3


def test_a_planted_minimum_detectable_difference_is_found_about_80_percent_of_the_time():
    # Eight seeds give the interval enough degrees of freedom for the approximation to hold.
    design = dict(shape=(8, 2, 200), **BOTH_LEVELS)
    planted = np.median([d.minimum_detectable for d in trials(count=50, **design)])
    found = np.mean([verdict(d) == "A better" for d in trials(planted, **design)])
    assert 0.65 <= found <= 0.92


def test_a_large_difference_names_the_better_objective():
    assert all(verdict(d) == "A better" for d in trials(1.0, count=50, **BOTH_LEVELS))


def test_for_losses_the_lower_side_is_better():
    a, b = simulate(np.random.default_rng(0), delta=-1.0)
    as_loss = paired_bootstrap(a, b, resamples=RESAMPLES, higher_is_better=False)
    as_score = paired_bootstrap(a, b, resamples=RESAMPLES)
    assert as_loss.estimate > 0 and as_loss.low > 0
    assert as_score.estimate == pytest.approx(-as_loss.estimate)
    assert verdict(as_loss) == "A better" and verdict(as_score) == "B better"
    assert as_loss.mean_a < as_loss.mean_b


def item_only_interval(a: np.ndarray, b: np.ndarray, rng: np.random.Generator):
    """Percentile interval from resampling test items alone, seeds ignored."""
    item_means = (a - b).mean(axis=(0, 1))
    picks = rng.integers(0, len(item_means), (RESAMPLES, len(item_means)))
    return np.percentile(item_means[picks].mean(axis=1), [2.5, 97.5])


def test_resampling_items_alone_is_too_narrow_when_seeds_vary():
    rng = np.random.default_rng(5)
    a, b = simulate(rng, seed_sd=1.0)
    low, high = item_only_interval(a, b, rng)
    hierarchical = paired_bootstrap(a, b, resamples=RESAMPLES)
    assert (high - low) * 3 < hierarchical.high - hierarchical.low


def test_identical_scores_show_no_difference():
    a, _ = simulate(np.random.default_rng(0))
    same = paired_bootstrap(a, a.copy(), resamples=RESAMPLES)
    assert (same.estimate, same.standard_error, same.p_value) == (0.0, 0.0, 1.0)
    assert verdict(same) == NO_DIFFERENCE


def test_same_seed_gives_same_result():
    a, b = simulate(np.random.default_rng(0))
    assert paired_bootstrap(a, b, seed=3) == paired_bootstrap(a, b, seed=3)


@pytest.mark.parametrize("shape, note", [
    ((3, 1, 50), None),
    ((1, 3, 50), "one pre-training seed"),
    ((1, 1, 50), "only the choice of test items"),
])
def test_notes_say_which_levels_the_interval_leaves_out(shape, note):
    a, b = simulate(np.random.default_rng(0), shape=shape)
    notes = paired_bootstrap(a, b, resamples=RESAMPLES).notes
    assert notes == () if note is None else note in notes[0]


def test_mismatched_shapes_are_named():
    with pytest.raises(ValueError, match=r"\(3, 3, 10\) and \(3, 2, 10\)"):
        paired_bootstrap(np.zeros((3, 3, 10)), np.zeros((3, 2, 10)))


@pytest.mark.parametrize("a, match", [
    (np.zeros((3, 10)), "one shape"),
    (np.zeros((3, 3, 1)), "at least 2 test items"),
    (np.full((2, 1, 4), np.nan), "NaN"),
])
def test_unusable_scores_are_rejected(a, match):
    with pytest.raises(ValueError, match=match):
        paired_bootstrap(a, np.zeros_like(a))


def test_holm_matches_hand_computed_values():
    # Sorted: 0.005·4 = 0.02, 0.01·3 = 0.03, 0.03·2 = 0.06, 0.04·1 = 0.04 → raised to 0.06.
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.2, 0.9]) == pytest.approx([0.4, 0.9])
    assert holm([0.5, 0.6]) == [1.0, 1.0]
    assert holm([]) == []


def test_holm_keeps_the_order_of_p_values_and_never_lowers_one():
    p = np.random.default_rng(0).uniform(0, 0.2, 12)
    adjusted = np.array(holm(p))
    order = np.argsort(p)
    assert np.all(np.diff(adjusted[order]) >= 0)
    assert np.all((adjusted >= p) & (adjusted <= 1))


def test_holm_rejects_impossible_p_values():
    with pytest.raises(ValueError, match=r"must lie in \[0, 1\]; got 1.2"):
        holm([0.1, 1.2, np.nan])


def difference(estimate: float, p_value: float, half_width: float) -> Difference:
    return Difference(estimate=estimate, low=estimate - half_width, high=estimate + half_width,
                      p_value=p_value, standard_error=half_width / 2, degrees_of_freedom=20,
                      minimum_detectable=0.021, resamples=2000, mean_a=0.5, mean_b=0.5)


def test_verdicts_adjust_across_measures_and_name_sides():
    found = verdicts({
        "accuracy": difference(0.05, 0.001, 0.02),
        "bits": difference(-0.05, 0.002, 0.02),
        # Each significant alone, neither after Holm.
        "recall": difference(0.03, 0.03, 0.029),
        "precision": difference(0.03, 0.04, 0.029),
    }, names=("mlm", "clm"))
    assert [v.says for v in found] == ["mlm better", "clm better", NO_DIFFERENCE, NO_DIFFERENCE]
    assert [v.adjusted_p for v in found] == pytest.approx([0.004, 0.006, 0.06, 0.06])
    assert found[2].text == "no detectable difference (this design detects ≥ 0.021)"
    assert found[0].text.startswith("mlm better by 0.05 (95% interval 0.03 to 0.07")
    assert found[1].text.startswith("clm better by 0.05 (95% interval 0.03 to 0.07")


def test_no_side_is_named_when_the_interval_covers_zero():
    assert verdicts({"m": difference(0.05, 0.001, 0.06)})[0].says == NO_DIFFERENCE


def test_t_quantiles_match_tables():
    table = {1: 12.706, 2: 4.303, 5: 2.571, 30: 2.042, 1000: 1.962}
    for df, quantile in table.items():
        assert _t_quantile(0.95, df) == pytest.approx(quantile, abs=1e-3)


def test_identical_scores_claim_no_power():
    same = np.full((2, 1, 5), 0.5)
    (found,) = verdicts({"accuracy": paired_bootstrap(same, same)})
    assert found.text == "no detectable difference (identical scores in every run and item)"
