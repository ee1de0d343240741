"""benchmarks/recipe_intervals.py judges a recipe search with lmlab compare's statistics: a
change better than its baseline in every seed by far more than the seeds' spread has an
interval that excludes zero, a change within the seeds' noise does not, and Holm's adjustment
runs across the changes of one search."""

import json
from pathlib import Path

import numpy as np
import pytest

from lmlab.compare.stats import holm, paired_bootstrap
from tests.benchmark_module import load_benchmark


@pytest.fixture(scope="module")
def intervals():
    return load_benchmark("recipe_intervals")


def search_file(tmp_path, runs: dict[str, list[float]]) -> Path:
    path = tmp_path / "search.json"
    path.write_text(json.dumps({"objective": "clm", "runs": {
        name: [{"seed": seed, "bpb": bpb} for seed, bpb in enumerate(scores)]
        for name, scores in runs.items()}}))
    return path


def test_a_clear_gain_excludes_zero_and_noise_does_not(intervals, tmp_path):
    path = search_file(tmp_path, {"baseline": [2.10, 2.12, 2.11, 2.13, 2.09],
                                  "clear": [2.00, 2.02, 2.01, 2.03, 1.99],
                                  "noise": [2.13, 2.09, 2.12, 2.10, 2.11]})
    clear, noise = intervals.judged([path])
    assert clear["bpb_change"] == pytest.approx(-0.10)
    assert clear["high"] < 0 and clear["excludes_zero"] and clear["verdict"] == "clear better"
    assert noise["low"] < 0 < noise["high"] and noise["verdict"] == "no detectable difference"
    assert clear["seeds"] == [0, 1, 2, 3, 4] and clear["degrees_of_freedom"] == 4


def test_rows_are_compare_s_bootstrap_and_holm(intervals, tmp_path):
    runs = {"baseline": [2.10, 2.12, 2.11], "a": [2.05, 2.10, 2.04], "b": [2.08, 2.13, 2.10]}
    rows = intervals.judged([search_file(tmp_path, runs)])
    base = np.array(runs["baseline"]).reshape(1, 1, -1)
    expected = [paired_bootstrap(np.array(runs[n]).reshape(1, 1, -1), base,
                                 higher_is_better=False) for n in ("a", "b")]
    assert [r["bpb_change"] for r in rows] == pytest.approx([-d.estimate for d in expected])
    assert [r["holm_p"] for r in rows] == pytest.approx(holm([d.p_value for d in expected]))


def test_a_search_scored_two_ways_is_judged_on_each(intervals, tmp_path):
    """init_recipe.py scores each run on the new text and on the base's own: one row each."""
    runs = {"baseline": [(2.10, 3.00), (2.12, 3.02), (2.11, 3.01)],
            "adamw": [(2.00, 3.10), (2.02, 3.12), (2.01, 3.11)]}
    path = tmp_path / "search.json"
    path.write_text(json.dumps({"objective": "clm", "scores": {"bpb": "", "base_bpb": ""},
                                "runs": {name: [{"seed": seed, "bpb": new, "base_bpb": old}
                                                for seed, (new, old) in enumerate(scores)]
                                         for name, scores in runs.items()}}))
    new, old = intervals.judged([path])
    assert (new["score"], old["score"]) == ("bpb", "base_bpb")
    assert new["bpb_change"] == pytest.approx(-0.10) and old["bpb_change"] == pytest.approx(0.10)
