import pytest

from lmlab.train.budget import parse_count, step_budget, steps_in_minutes


def test_counts_and_budgets():
    assert parse_count("20M") == 20_000_000 and parse_count("1.5k") == 1500
    assert parse_count("4096") == 4096
    assert step_budget(100, None, 10**6, 4096) == 100
    assert step_budget(None, "chinchilla", 10**6, 4096) == 4883  # ceil(2e7 / 4096)
    assert step_budget(100, "1M", 0, 4096) == 100  # the smaller budget wins
    assert step_budget(None, None, 10**6, 4096) is None
    assert steps_in_minutes(2, 0.5) == 240


def test_unreadable_count():
    with pytest.raises(ValueError, match="cannot read 'lots' as a token count"):
        parse_count("lots")
