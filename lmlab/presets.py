"""Named model presets: an architecture family × a size.

A family fixes the switches that map to a Hugging Face class (`bert` → BertFor*, `gpt2` →
GPT2LMHeadModel, `modern` → Llama-family); a size fixes depth and width. Everything else is
derived in ModelConfig.
"""

from __future__ import annotations

from lmlab.config import ModelConfig

FAMILIES: dict[str, dict] = {
    # Devlin et al. 2019: post-LN, learned positions, exact GELU, segment embeddings.
    "bert": dict(
        norm="layernorm", norm_placement="post", positions="learned", activation="gelu",
        bias=True, type_vocab_size=2, tie_embeddings=True, norm_eps=1e-12, dropout=0.1,
    ),
    # Radford et al. 2019: pre-LN with a final norm, learned positions, tanh-GELU.
    "gpt2": dict(
        norm="layernorm", norm_placement="pre", positions="learned", activation="gelu_tanh",
        bias=True, type_vocab_size=0, tie_embeddings=True, norm_eps=1e-5, dropout=0.1,
    ),
    # LLaMA-style: pre-RMSNorm, rotary positions, SwiGLU, no biases; an output head of its own,
    # which learned more per second than a tied one (benchmarks/results/time_to_quality_*.json).
    "modern": dict(
        norm="rmsnorm", norm_placement="pre", positions="rotary", activation="swiglu",
        bias=False, type_vocab_size=0, tie_embeddings=False, norm_eps=1e-6, dropout=0.0,
    ),
}

SIZES: dict[str, dict] = {
    "tiny": dict(n_layers=2, d_model=64, n_heads=2),
    "mini": dict(n_layers=4, d_model=256, n_heads=4),
    "small": dict(n_layers=6, d_model=512, n_heads=8),
    "medium": dict(n_layers=8, d_model=512, n_heads=8),
    "base": dict(n_layers=12, d_model=768, n_heads=12),
}


def auto_family(objective) -> str:
    """The family `--model auto` gives an objective: `modern` for every one, as it reached a
    lower held-out loss in the same time than BERT's and GPT-2's architectures, masked and
    causal (benchmarks/results/time_to_quality_*.json). Export to Hugging Face needs the bert
    family for masked models (`--model bert-mini`)."""
    return "modern"


def preset_names() -> list[str]:
    return [f"{family}-{size}" for family in FAMILIES for size in SIZES]


def preset(name: str, vocab_size: int, max_seq_len: int = 512, **overrides) -> ModelConfig:
    """`preset("bert-tiny", vocab_size=8192)`; any ModelConfig field may be overridden."""
    family, _, size = name.partition("-")
    if family not in FAMILIES or size not in SIZES:
        raise ValueError(f"unknown preset {name!r}; choose from {', '.join(preset_names())}")
    fields = {**FAMILIES[family], **SIZES[size], "vocab_size": vocab_size,
              "max_seq_len": max_seq_len}
    base = ModelConfig(**fields)
    return base.with_changes(**overrides) if overrides else base
