"""Named model presets: an architecture family × a size.

A family fixes the switches that map to a Hugging Face class (`bert` → BertFor*, `gpt2` →
GPT2LMHeadModel, `modern` → Llama-family); a size fixes depth and width. Everything else is
derived in ModelConfig.
"""

from __future__ import annotations

from lmlab.config.model import ModelConfig

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
    # LLaMA-style: pre-RMSNorm, rotary positions, SwiGLU, no biases; the output head tied to
    # the embeddings, which learned more in a fixed time than a head of its own, at five paired
    # seeds (benchmarks/results/time_to_quality_clm_defaults.json).
    "modern": dict(
        norm="rmsnorm", norm_placement="pre", positions="rotary", activation="swiglu",
        bias=False, type_vocab_size=0, tie_embeddings=True, norm_eps=1e-6, dropout=0.0,
    ),
    # ModernBERT (Warner et al. 2024), the modern encoder: pre-LayerNorm without biases, the
    # embeddings normalised once, rotary positions, GeGLU, task heads through a dense → GELU →
    # norm transform; every layer global (lmlab has no sliding-window attention). Output head
    # untied: a tied one was measured against it for causal LM only.
    "modernbert": dict(
        norm="layernorm", norm_placement="pre", positions="rotary", activation="geglu",
        bias=False, type_vocab_size=0, tie_embeddings=False, norm_eps=1e-5, dropout=0.0,
        embedding_norm=True, head_transform=True,
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
    """The family `--model auto` gives an objective: the modern ones, as they reached a lower
    held-out loss in the same time than BERT's and GPT-2's architectures, masked and causal
    (benchmarks/results/time_to_quality_*.json): `modernbert` for objectives that only read
    bidirectionally (a masked model then exports as ModernBertForMaskedLM), else `modern`
    (Llama's classes)."""
    return "modernbert" if objective.reads_only_bidirectionally else "modern"


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
