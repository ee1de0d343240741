"""Pre-training objectives: each turns token ids into a Batch and outputs into a LossSum."""

from lmlab.lazy import lazy_attributes

__getattr__ = lazy_attributes(__name__, {
    "IGNORE_INDEX": "lmlab.objectives.losses", "LossSum": "lmlab.objectives.losses",
    "Batch": "lmlab.objectives.batch", "Objective": "lmlab.objectives.base",
    "SpecialTokens": "lmlab.data.special_tokens",
    "CausalLM": "lmlab.objectives.clm", "Alternating": "lmlab.objectives.mixture",
    "Mixture": "lmlab.objectives.mixture", "LinearRate": "lmlab.objectives.mlm",
    "MaskedLM": "lmlab.objectives.mlm", "MaskedLMWithNSP": "lmlab.objectives.nsp",
    "PrefixLM": "lmlab.objectives.prefix_lm", "SpanCorruption": "lmlab.objectives.span_corruption",
    "Then": "lmlab.objectives.sequence",
})

__all__ = [
    "IGNORE_INDEX", "Alternating", "Batch", "CausalLM", "LinearRate", "LossSum", "MaskedLM",
    "MaskedLMWithNSP", "Mixture", "Objective", "PrefixLM", "SpanCorruption", "SpecialTokens",
    "Then",
]
