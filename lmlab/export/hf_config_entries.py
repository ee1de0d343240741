"""The `config.json` entries of each Hugging Face family, both ways: what lmlab writes for a
ModelConfig (read alike by transformers 4.40+ and 5.x), and the ModelConfig fields a
config.json gives, refusing what lmlab cannot reproduce. The family tables in `hf.py` name
these functions."""

from __future__ import annotations

from collections.abc import Mapping

from lmlab.config import ModelConfig

# --- config.json, lmlab → HF: what transformers 4.40+ and 5.x both read ----------------------

def common_entries(cfg: ModelConfig) -> dict:
    return dict(
        vocab_size=cfg.vocab_size, tie_word_embeddings=cfg.tie_embeddings,
        initializer_range=cfg.init_std,
        # Special ids belong to the tokenizer, not the architecture; HF's defaults (GPT-2's
        # 50256, say) would point outside a small vocabulary.
        bos_token_id=None, eos_token_id=None, pad_token_id=None,
    )


def bert_entries(cfg: ModelConfig) -> dict:
    return dict(
        hidden_size=cfg.d_model, num_hidden_layers=cfg.n_layers,
        num_attention_heads=cfg.n_heads, intermediate_size=cfg.ffn_dim, hidden_act="gelu",
        hidden_dropout_prob=cfg.dropout, attention_probs_dropout_prob=cfg.dropout,
        max_position_embeddings=cfg.max_seq_len, type_vocab_size=cfg.type_vocab_size,
        layer_norm_eps=cfg.norm_eps,
    )


def gpt2_entries(cfg: ModelConfig) -> dict:
    return dict(
        n_embd=cfg.d_model, n_layer=cfg.n_layers, n_head=cfg.n_heads, n_inner=cfg.ffn_dim,
        activation_function="gelu_new",  # GPT-2's tanh approximation, our "gelu_tanh"
        resid_pdrop=cfg.dropout, embd_pdrop=cfg.dropout, attn_pdrop=cfg.dropout,
        n_positions=cfg.max_seq_len, layer_norm_epsilon=cfg.norm_eps,
    )


def llama_entries(cfg: ModelConfig) -> dict:
    return dict(
        hidden_size=cfg.d_model, num_hidden_layers=cfg.n_layers,
        num_attention_heads=cfg.n_heads, num_key_value_heads=cfg.kv_heads,
        head_dim=cfg.head_dim, intermediate_size=cfg.ffn_dim, hidden_act="silu",
        rms_norm_eps=cfg.norm_eps, max_position_embeddings=cfg.max_seq_len,
        # transformers 5 reads rope_parameters (and prefers it), 4.x reads rope_theta.
        rope_theta=cfg.rope_theta,
        rope_parameters={"rope_type": "default", "rope_theta": cfg.rope_theta},
        attention_bias=False, mlp_bias=False,
        attention_dropout=cfg.dropout,  # Llama has no residual or embedding dropout
    )


# ModernBERT's MLP activation → lmlab's gated MLP of the same computation (the family's).
MODERNBERT_ACTIVATIONS = {"gelu": "geglu"}


def modernbert_entries(cfg: ModelConfig) -> dict:
    rope = {"rope_type": "default", "rope_theta": cfg.rope_theta}
    activation = {ours: theirs for theirs, ours in MODERNBERT_ACTIVATIONS.items()}
    return dict(
        hidden_size=cfg.d_model, num_hidden_layers=cfg.n_layers,
        num_attention_heads=cfg.n_heads, intermediate_size=cfg.ffn_dim,
        hidden_activation=activation[cfg.activation], max_position_embeddings=cfg.max_seq_len,
        norm_eps=cfg.norm_eps, norm_bias=False, attention_bias=False, mlp_bias=False,
        # Every layer global: lmlab has no sliding window. 4.x reads the last two entries.
        layer_types=["full_attention"] * cfg.n_layers, global_attn_every_n_layers=1,
        rope_parameters={"full_attention": rope, "sliding_attention": rope},
        global_rope_theta=cfg.rope_theta, local_rope_theta=cfg.rope_theta,
        # lmlab's MLM head has biases in its dense layer and decoder.
        classifier_bias=True, decoder_bias=True, classifier_activation="gelu",
        embedding_dropout=cfg.dropout, attention_dropout=cfg.dropout, mlp_dropout=cfg.dropout,
        classifier_dropout=cfg.dropout, cls_token_id=None, sep_token_id=None,
    )


# --- config.json, HF → lmlab ----------------------------------------------------------------
# Each reader starts from the HF config class's defaults, as transformers does for a
# config.json that leaves entries out.

def _require(settings: Mapping, name: str, allowed: tuple) -> None:
    if settings[name] not in allowed:
        raise ValueError(f"{name}={settings[name]!r} is not supported; lmlab reproduces "
                         f"{' or '.join(map(repr, allowed))}")


_BERT_DEFAULTS = dict(
    vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
    intermediate_size=3072, hidden_act="gelu", hidden_dropout_prob=0.1,
    max_position_embeddings=512, type_vocab_size=2, initializer_range=0.02,
    layer_norm_eps=1e-12, tie_word_embeddings=True, position_embedding_type="absolute",
)


def bert_fields(config: Mapping) -> dict:
    settings = {**_BERT_DEFAULTS, **config}
    _require(settings, "hidden_act", ("gelu",))
    _require(settings, "position_embedding_type", ("absolute",))
    return dict(
        vocab_size=settings["vocab_size"], n_layers=settings["num_hidden_layers"],
        d_model=settings["hidden_size"], n_heads=settings["num_attention_heads"],
        ffn_size=settings["intermediate_size"],
        max_seq_len=settings["max_position_embeddings"],
        type_vocab_size=settings["type_vocab_size"], norm_eps=settings["layer_norm_eps"],
        dropout=settings["hidden_dropout_prob"], tie_embeddings=settings["tie_word_embeddings"],
        init_std=settings["initializer_range"],
    )


_GPT2_DEFAULTS = dict(
    vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12, n_head=12, n_inner=None,
    activation_function="gelu_new", resid_pdrop=0.1, layer_norm_epsilon=1e-5,
    initializer_range=0.02, scale_attn_weights=True, scale_attn_by_inverse_layer_idx=False,
    tie_word_embeddings=True,
)


def gpt2_fields(config: Mapping) -> dict:
    settings = {**_GPT2_DEFAULTS, **config}
    _require(settings, "activation_function", ("gelu_new", "gelu_pytorch_tanh"))
    _require(settings, "scale_attn_weights", (True,))
    _require(settings, "scale_attn_by_inverse_layer_idx", (False,))
    return dict(
        vocab_size=settings["vocab_size"], n_layers=settings["n_layer"],
        d_model=settings["n_embd"], n_heads=settings["n_head"],
        ffn_size=settings["n_inner"],  # None: 4·n_embd, as lmlab derives it
        max_seq_len=settings["n_positions"], norm_eps=settings["layer_norm_epsilon"],
        dropout=settings["resid_pdrop"], tie_embeddings=settings["tie_word_embeddings"],
        init_std=settings["initializer_range"],
    )


_LLAMA_DEFAULTS = dict(
    vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
    num_attention_heads=32, num_key_value_heads=None, head_dim=None, hidden_act="silu",
    max_position_embeddings=2048, initializer_range=0.02, rms_norm_eps=1e-6,
    tie_word_embeddings=False, rope_theta=10000.0, attention_bias=False, mlp_bias=False,
    attention_dropout=0.0,
)


def _rope_theta(settings: Mapping) -> float:
    """The rotary base from 5.x's rope_parameters or 4.x's rope_theta; scaled variants
    (linear, dynamic, llama3, yarn...) change the frequencies, which lmlab does not."""
    name = "rope_parameters" if settings.get("rope_parameters") else "rope_scaling"
    rope = settings.get(name) or {}
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind != "default":
        raise ValueError(f"{name} of type {kind!r} is not supported; lmlab reproduces 'default'")
    return rope.get("rope_theta", settings["rope_theta"])


def llama_fields(config: Mapping) -> dict:
    settings = {**_LLAMA_DEFAULTS, **config}
    _require(settings, "hidden_act", ("silu",))
    _require(settings, "attention_bias", (False,))
    _require(settings, "mlp_bias", (False,))
    return dict(
        vocab_size=settings["vocab_size"], n_layers=settings["num_hidden_layers"],
        d_model=settings["hidden_size"], n_heads=settings["num_attention_heads"],
        n_kv_heads=settings["num_key_value_heads"], head_size=settings["head_dim"],
        ffn_size=settings["intermediate_size"],
        max_seq_len=settings["max_position_embeddings"], norm_eps=settings["rms_norm_eps"],
        rope_theta=_rope_theta(settings), dropout=settings["attention_dropout"],
        tie_embeddings=settings["tie_word_embeddings"], init_std=settings["initializer_range"],
    )


_MODERNBERT_DEFAULTS = dict(
    vocab_size=50368, hidden_size=768, intermediate_size=1152, num_hidden_layers=22,
    num_attention_heads=12, hidden_activation="gelu", max_position_embeddings=8192,
    initializer_range=0.02, norm_eps=1e-5, norm_bias=False, attention_bias=False,
    mlp_bias=False, classifier_bias=False, decoder_bias=True, classifier_activation="gelu",
    global_attn_every_n_layers=3, global_rope_theta=160000.0, tie_word_embeddings=True,
    embedding_dropout=0.0,
)


def _modernbert_rope_theta(settings: Mapping) -> float:
    """The one rotary base of a model whose every layer is global."""
    layer_types = settings.get("layer_types") or [
        "sliding_attention" if i % settings["global_attn_every_n_layers"] else "full_attention"
        for i in range(settings["num_hidden_layers"])]
    if set(layer_types) != {"full_attention"}:
        raise ValueError("layers with sliding-window attention are not supported; lmlab "
                         "reproduces ModernBERT with every layer global "
                         "(global_attn_every_n_layers=1)")
    rope = (settings.get("rope_parameters") or {}).get("full_attention") or {}
    if rope.get("rope_type", "default") != "default":
        raise ValueError(f"rope_parameters of type {rope['rope_type']!r} are not supported; "
                         "lmlab reproduces 'default'")
    return rope.get("rope_theta", settings["global_rope_theta"])


def modernbert_fields(config: Mapping) -> dict:
    settings = {**_MODERNBERT_DEFAULTS, **config}
    _require(settings, "hidden_activation", tuple(MODERNBERT_ACTIVATIONS))
    for name in ("norm_bias", "attention_bias", "mlp_bias"):
        _require(settings, name, (False,))
    _require(settings, "decoder_bias", (True,))  # classifier_bias False reads as a zero bias
    _require(settings, "classifier_activation", ("gelu",))
    return dict(
        vocab_size=settings["vocab_size"], n_layers=settings["num_hidden_layers"],
        d_model=settings["hidden_size"], n_heads=settings["num_attention_heads"],
        ffn_size=settings["intermediate_size"],
        activation=MODERNBERT_ACTIVATIONS[settings["hidden_activation"]],
        max_seq_len=settings["max_position_embeddings"], norm_eps=settings["norm_eps"],
        rope_theta=_modernbert_rope_theta(settings), dropout=settings["embedding_dropout"],
        tie_embeddings=settings["tie_word_embeddings"], init_std=settings["initializer_range"],
    )
