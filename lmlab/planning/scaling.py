"""A Chinchilla-style scaling law, L(N, D) = E + A / N^α + B / D^β, and its compute optimum.

The constants are Besiroglu et al. 2024's refit ("Chinchilla Scaling: A replication attempt")
of Hoffmann et al. 2022's third approach. They were fitted to causal LMs of 70M to 16B
parameters (N counting all of them) trained on 5B to 500B tokens of MassiveText with
Hoffmann et al.'s tokenizer. For other objectives, tokenizers or data the predicted loss is a
relative guide between sizes, not a promise of a loss value; far below those sizes it is an
extrapolation.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ScalingLaw:
    E: float  # the irreducible loss, in nats per token
    A: float
    B: float
    alpha: float  # how fast loss falls with parameters
    beta: float  # and with training tokens

    def loss(self, parameters: float, tokens: float) -> float:
        return self.E + self.A / parameters**self.alpha + self.B / tokens**self.beta

    @property
    def _scale(self) -> float:
        """G = (αA / (βB))^(1/(α+β)), so that N_opt = G · (C/6)^(β/(α+β))."""
        return (self.alpha * self.A / (self.beta * self.B)) ** (1 / (self.alpha + self.beta))

    def optimal_parameters(self, flops: float) -> float:
        """The N minimising L(N, D) subject to C = 6·N·D (Hoffmann et al. 2022, eq. 4); the
        optimal tokens are then C / (6·N)."""
        return self._scale * (flops / 6) ** (self.beta / (self.alpha + self.beta))

    def flops_optimal_for(self, tokens: float) -> float:
        """The C at which `tokens` are compute-optimal: inverting D_opt = (C/6)^(α/(α+β)) / G."""
        return 6 * (self._scale * tokens) ** ((self.alpha + self.beta) / self.alpha)


CHINCHILLA = ScalingLaw(E=1.8172, A=482.01, B=2085.43, alpha=0.3478, beta=0.3658)
