"""Choosing the next token from logits: greedy, temperature, top-k, top-p (nucleus) and a
repetition penalty. Pure functions on (B, V) logits; randomness only from the given generator.

Order, as in most generation libraries: repetition penalty → temperature → top-k → top-p →
draw. Filters set the logits of excluded tokens to -inf, so the draw cannot pick them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class Sampling:
    """How to pick each next token. `temperature=0` (or `greedy=True`) takes the argmax."""

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    repetition_penalty: float = 1.0  # > 1 discourages tokens already in the prompt or output
    greedy: bool = False

    def __post_init__(self) -> None:
        if not self.temperature >= 0:  # NaN too
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k is not None and self.top_k < 1:
            raise ValueError(f"top_k must be at least 1, got {self.top_k}")
        if self.top_p is not None and not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if not self.repetition_penalty > 0:
            raise ValueError(f"repetition_penalty must be positive, got "
                             f"{self.repetition_penalty}")

    @property
    def is_greedy(self) -> bool:
        return self.greedy or self.temperature == 0


def penalize_repetition(logits: Tensor, seen: Tensor, penalty: float) -> Tensor:
    """CTRL's penalty (Keskar et al. 2019) on tokens already seen (`seen`: (B, V) bool):
    a positive logit is divided by `penalty`, a negative one multiplied, so both lose mass."""
    penalized = torch.where(logits > 0, logits / penalty, logits * penalty)
    return torch.where(seen, penalized, logits)


def keep_top_k(logits: Tensor, k: int) -> Tensor:
    """Exactly the k largest logits of each row survive (ties broken by index)."""
    k = min(k, logits.shape[-1])
    kept = torch.full_like(logits, -torch.inf)
    values, indices = logits.topk(k, dim=-1)
    return kept.scatter(-1, indices, values)


def keep_top_p(logits: Tensor, p: float) -> Tensor:
    """The smallest set of most likely tokens whose probability mass reaches `p` survives
    (Holtzman et al. 2020); the most likely token always does."""
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    probabilities = sorted_logits.softmax(dim=-1)
    mass_before = probabilities.cumsum(dim=-1) - probabilities
    drop_sorted = mass_before >= p  # the set already reached p without this token
    drop_sorted[..., 0] = False
    drop = drop_sorted.scatter(-1, order, drop_sorted)
    return logits.masked_fill(drop, -torch.inf)


def distribution(logits: Tensor, sampling: Sampling, seen: Tensor | None = None) -> Tensor:
    """(B, V) logits → (B, V) probabilities to draw from, after every adjustment."""
    logits = logits.float()
    if sampling.repetition_penalty != 1.0 and seen is not None:
        logits = penalize_repetition(logits, seen, sampling.repetition_penalty)
    logits = logits / sampling.temperature
    if sampling.top_k is not None:
        logits = keep_top_k(logits, sampling.top_k)
    if sampling.top_p is not None and sampling.top_p < 1.0:
        logits = keep_top_p(logits, sampling.top_p)
    return logits.softmax(dim=-1)


def next_tokens(logits: Tensor, sampling: Sampling, seen: Tensor | None = None,
                generator: torch.Generator | None = None) -> Tensor:
    """(B, V) logits → (B,) chosen token ids."""
    if sampling.is_greedy:
        if sampling.repetition_penalty != 1.0 and seen is not None:
            logits = penalize_repetition(logits.float(), seen, sampling.repetition_penalty)
        return logits.argmax(dim=-1)
    probabilities = distribution(logits, sampling, seen)
    return torch.multinomial(probabilities, 1, generator=generator).squeeze(1)
