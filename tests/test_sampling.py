"""Next-token choice on known logits: the math of each adjustment, and draws that never leave
the allowed set."""

import math

import pytest
import torch

from lmlab.infer.sampling import (
    Sampling,
    distribution,
    keep_top_k,
    keep_top_p,
    next_tokens,
    penalize_repetition,
)
from tests.conftest import seeded

DRAWS = 4000


def draws(logits: torch.Tensor, sampling: Sampling, seed: int = 0) -> set[int]:
    """The set of tokens drawn in DRAWS independent draws from one row of logits."""
    batch = logits.expand(DRAWS, -1)
    return set(next_tokens(batch, sampling, generator=seeded(seed)).tolist())


def shuffled_logits(probabilities: list[float], seed: int = 0) -> tuple[torch.Tensor, list]:
    """Logits of the given probabilities at shuffled vocabulary positions, and the position
    of each probability (so no test passes just because the best token is token 0)."""
    order = torch.randperm(len(probabilities), generator=seeded(seed))
    logits = torch.empty(len(probabilities))
    logits[order] = torch.tensor(probabilities).log()
    return logits, order.tolist()


def test_top_k_only_ever_draws_the_k_largest():
    logits, where = shuffled_logits([0.3, 0.2, 0.15, 0.12, 0.1, 0.08, 0.05])
    assert draws(logits, Sampling(top_k=3)) == {where[0], where[1], where[2]}
    kept = keep_top_k(logits[None], 3)[0]
    assert torch.isfinite(kept).sum() == 3


@pytest.mark.parametrize("p,size", [(0.9, 3), (0.81, 3), (0.79, 2), (0.45, 1), (1.0, 4)])
def test_top_p_keeps_the_smallest_set_whose_mass_reaches_p(p, size):
    probabilities = [0.5, 0.3, 0.15, 0.05]  # cumulative 0.5, 0.8, 0.95, 1.0
    logits, where = shuffled_logits(probabilities, seed=1)
    assert draws(logits, Sampling(top_p=p)) == set(where[:size])
    kept = keep_top_p(logits[None], p)[0] if p < 1 else logits
    assert torch.isfinite(kept).sum() == size


def test_top_k_and_top_p_renormalise_what_they_keep():
    logits, where = shuffled_logits([0.5, 0.3, 0.15, 0.05], seed=2)
    probabilities = distribution(logits[None], Sampling(top_k=3, top_p=0.7))[0]
    assert probabilities[where[0]] == pytest.approx(0.5 / 0.8)
    assert probabilities[where[1]] == pytest.approx(0.3 / 0.8)
    assert probabilities.sum() == pytest.approx(1.0)


def test_temperature_divides_the_logits():
    logits = torch.tensor([[0.0, math.log(2.0)]])  # probabilities 1/3, 2/3
    # T = 0.5 squares the odds: 1 : 4.
    assert distribution(logits, Sampling(temperature=0.5))[0].tolist() == pytest.approx(
        [0.2, 0.8])
    assert distribution(logits, Sampling(temperature=2.0))[0].tolist() == pytest.approx(
        [1 / (1 + 2**0.5), 2**0.5 / (1 + 2**0.5)])


def test_repetition_penalty_lowers_seen_tokens_whatever_their_sign():
    logits = torch.tensor([[2.0, -1.0, 0.5, -0.5]])
    seen = torch.tensor([[True, True, False, False]])
    assert penalize_repetition(logits, seen, 2.0).tolist() == [[1.0, -2.0, 0.5, -0.5]]
    # Greedy with the penalty: token 0 (2.0 → 1.0) still beats 0.5; with 5.0 it does not.
    assert next_tokens(logits, Sampling(greedy=True, repetition_penalty=2.0), seen) == 0
    assert next_tokens(logits, Sampling(greedy=True, repetition_penalty=5.0), seen) == 2


def test_greedy_and_zero_temperature_take_the_argmax():
    logits = torch.randn(5, 30, generator=seeded(3))
    for sampling in (Sampling(greedy=True), Sampling(temperature=0)):
        assert torch.equal(next_tokens(logits, sampling), logits.argmax(dim=1))


def test_draws_follow_the_distribution_and_repeat_with_the_seed():
    logits, where = shuffled_logits([0.6, 0.3, 0.1], seed=4)
    batch = logits.expand(20000, -1)
    chosen = next_tokens(batch, Sampling(), generator=seeded(5))
    frequency = torch.bincount(chosen, minlength=3).float() / len(chosen)
    assert frequency[where].tolist() == pytest.approx([0.6, 0.3, 0.1], abs=0.015)
    assert torch.equal(chosen, next_tokens(batch, Sampling(), generator=seeded(5)))


@pytest.mark.parametrize("options,message", [
    (dict(temperature=-1), "temperature must be >= 0"),
    (dict(top_k=0), "top_k must be at least 1"),
    (dict(top_p=0.0), "top_p must be in"),
    (dict(repetition_penalty=0), "repetition_penalty must be positive"),
])
def test_bad_settings_are_named(options, message):
    with pytest.raises(ValueError, match=message):
        Sampling(**options)
