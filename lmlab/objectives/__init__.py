"""Pre-training objectives: each turns token ids into a Batch and outputs into a LossSum."""

from lmlab.objectives.base import IGNORE_INDEX, Batch, LossSum, Objective, SpecialTokens
from lmlab.objectives.clm import CausalLM
from lmlab.objectives.mixture import Alternating, Mixture
from lmlab.objectives.mlm import LinearRate, MaskedLM
from lmlab.objectives.nsp import MaskedLMWithNSP
from lmlab.objectives.prefix_lm import PrefixLM
from lmlab.objectives.span_corruption import SpanCorruption

__all__ = [
    "IGNORE_INDEX", "Alternating", "Batch", "CausalLM", "LinearRate", "LossSum", "MaskedLM",
    "MaskedLMWithNSP", "Mixture", "Objective", "PrefixLM", "SpanCorruption", "SpecialTokens",
]
