"""Source specs with weights, and weighted mixing."""

import numpy as np
import pytest

from lmlab.data.preparation.mixing import (
    SourceSpec,
    mix,
    parse_source,
    plan_mix,
    realised_shares,
    resample,
)
from tests.test_readers import one_line_error

# ---------------------------------------------------------------- source specs


def test_source_specs_take_a_trailing_number_as_weight(tmp_path):
    assert parse_source("corpus.jsonl:0.7") == SourceSpec("corpus.jsonl", 0.7)
    assert parse_source("code/:3") == SourceSpec("code/", 3.0)
    assert parse_source("plain.txt") == SourceSpec("plain.txt", None)
    assert parse_source("s3:bucket/x.txt") == SourceSpec("s3:bucket/x.txt", None)
    existing = tmp_path / "odd:2"
    existing.write_text("x")
    assert parse_source(str(existing)) == SourceSpec(str(existing), None)
    one_line_error("a.txt:-1: the weight must be a positive number",
                   lambda: parse_source("a.txt:-1"))


# ---------------------------------------------------------------- mixing


def test_weights_are_target_shares_met_by_resampling():
    counts = {"big": 2000, "small": 200}
    plan = plan_mix(counts, {"big": 0.7, "small": 0.3})
    assert [round(s.multiplier, 3) for s in plan] == [0.77, 3.3]
    streams = [[f"big {i}" for i in range(2000)], [f"small {i}" for i in range(200)]]
    mixed = list(mix(streams, plan, seed=0))
    shares = realised_shares(plan)
    assert abs(shares["big"] - 0.7) < 0.02 and abs(shares["small"] - 0.3) < 0.02
    assert abs(len(mixed) - 2200) < 60  # the corpus keeps its size
    assert [s.documents_in for s in plan] == [2000, 200]
    # Interleaved evenly: the first tenth already has about the target shares.
    head = mixed[: len(mixed) // 10]
    assert 0.2 < sum(d.startswith("small") for d in head) / len(head) < 0.4


def test_mixing_is_deterministic_for_a_seed():
    def run(seed):
        plan = plan_mix({"a": 50, "b": 50}, {"a": 1, "b": 2})
        return list(mix([range(50), range(100, 150)], plan, seed))

    assert run(1) == run(1) and run(1) != run(2)


def test_no_weights_keep_every_document_once():
    plan = plan_mix({"a": 3, "b": 2}, None)
    assert sorted(mix([["a1", "a2", "a3"], ["b1", "b2"]], plan, seed=0)) == \
        ["a1", "a2", "a3", "b1", "b2"]
    assert realised_shares(plan) == {"a": 0.6, "b": 0.4}


def test_resampling_keeps_the_expected_count():
    rng = np.random.default_rng(0)
    assert len(list(resample(range(10_000), 2.25, rng))) == pytest.approx(22_500, rel=0.01)
    assert len(list(resample(range(10_000), 0.1, rng))) == pytest.approx(1_000, rel=0.1)


def test_weights_for_some_sources_only_are_refused():
    one_line_error("give every source a weight, or none",
                   lambda: plan_mix({"a": 1, "b": 1}, {"a": 0.5}))
    (unweighted,) = plan_mix({"a": 4}, None)
    assert (unweighted.multiplier, unweighted.share) == (1.0, 1.0)
