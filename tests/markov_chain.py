"""A synthetic language with a known entropy: a random first-order Markov chain.

A model trained on it can be checked against the floor: its cross-entropy should approach
the chain's entropy rate and never go below it (going below means information leaks through
the attention mask). For masked positions the floor is the exact posterior of each masked
symbol given all visible ones, computed by forward-backward.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class MarkovChain:
    transitions: np.ndarray  # (S, S), rows sum to 1: P(next = j | current = i)

    @classmethod
    def random(cls, n_symbols: int = 50, concentration: float = 0.1,
               seed: int = 0) -> MarkovChain:
        """Rows drawn from a symmetric Dirichlet; small `concentration` = peaked rows."""
        rng = np.random.default_rng(seed)
        return cls(rng.dirichlet(np.full(n_symbols, concentration), size=n_symbols))

    @property
    def n_symbols(self) -> int:
        return len(self.transitions)

    def stationary(self) -> np.ndarray:
        values, vectors = np.linalg.eig(self.transitions.T)
        pi = np.real(vectors[:, np.argmin(np.abs(values - 1))])
        return pi / pi.sum()

    def entropy_rate(self) -> float:
        """H = Σ_i π_i · H(P(· | i)), in nats per symbol."""
        p = self.transitions
        row_entropy = -(p * np.log(np.where(p > 0, p, 1.0))).sum(1)
        return float(self.stationary() @ row_entropy)

    def sample(self, rows: int, length: int, rng: np.random.Generator) -> np.ndarray:
        """(rows, length) symbols, each row started from the stationary distribution."""
        cumulative = np.cumsum(self.transitions, axis=1)
        out = np.empty((rows, length), dtype=np.int64)
        out[:, 0] = rng.choice(self.n_symbols, size=rows, p=self.stationary())
        for t in range(1, length):
            u = rng.random(rows)[:, None]
            out[:, t] = np.minimum((u > cumulative[out[:, t - 1]]).sum(1), self.n_symbols - 1)
        return out

    def next_symbol_nll(self, symbols: np.ndarray) -> np.ndarray:
        """-log P(x[t+1] | x[t]) for every t: the causal floor, per prediction."""
        return -np.log(self.transitions[symbols[:, :-1], symbols[:, 1:]])

    def masked_symbol_nll(self, symbols: np.ndarray, hidden: np.ndarray) -> np.ndarray:
        """-log P(x[t] | all visible symbols) at every hidden position (NaN elsewhere).

        Forward-backward over one row: alpha/beta carry the evidence from the left/right,
        with visible symbols clamped and hidden ones summed out.
        """
        rows, length = symbols.shape
        p, pi = self.transitions, self.stationary()
        out = np.full((rows, length), np.nan)
        for r in range(rows):
            evidence = np.ones((length, self.n_symbols))
            for t in np.flatnonzero(~hidden[r]):
                evidence[t] = 0.0
                evidence[t, symbols[r, t]] = 1.0
            alpha = np.empty((length, self.n_symbols))
            alpha[0] = pi * evidence[0]
            alpha[0] /= alpha[0].sum()
            for t in range(1, length):
                alpha[t] = (alpha[t - 1] @ p) * evidence[t]
                alpha[t] /= alpha[t].sum()
            beta = np.ones((length, self.n_symbols))
            for t in range(length - 2, -1, -1):
                beta[t] = p @ (evidence[t + 1] * beta[t + 1])
                beta[t] /= beta[t].sum()
            for t in np.flatnonzero(hidden[r]):
                posterior = alpha[t] * beta[t]
                out[r, t] = -np.log(posterior[symbols[r, t]] / posterior.sum())
        return out
