"""lmlab: pre-train, compare and use transformer language models with every classic
self-supervised objective on one backbone."""

from lmlab.config import ModelConfig
from lmlab.eval.evaluate import evaluate
from lmlab.infer import load
from lmlab.model import KVCache, LanguageModel, MaskSpec
from lmlab.objectives import (
    Alternating,
    Batch,
    CausalLM,
    LinearRate,
    LossSum,
    MaskedLM,
    MaskedLMWithNSP,
    Mixture,
    PrefixLM,
    SpanCorruption,
    SpecialTokens,
)
from lmlab.presets import preset, preset_names

__version__ = "0.1.0"

__all__ = [
    "Alternating", "Batch", "CausalLM", "KVCache", "LanguageModel", "LinearRate", "LossSum",
    "MaskSpec", "MaskedLM", "MaskedLMWithNSP", "Mixture", "ModelConfig", "PrefixLM",
    "SpanCorruption", "SpecialTokens", "evaluate", "load", "preset",
    "preset_names",
]
