"""Hugging Face ↔ lmlab weights and configs: one name table per family, in the spirit of
torchtitan's and litgpt's converters.

A table maps each lmlab parameter (`{i}` standing for the layer index) to the Hugging Face
key(s) holding it, and names the transform between them: the same tensor, GPT-2's transposed
Conv1D layout, or one fused lmlab projection split into several HF ones (q/k/v, gate/up).

    bert   ↔ BertForPreTraining (or BertForMaskedLM / BertForNextSentencePrediction), and
             fine-tuned: BertForSequenceClassification, BertForTokenClassification,
             BertForQuestionAnswering
    gpt2   ↔ GPT2LMHeadModel
    modern ↔ LlamaForCausalLM

Configs go both ways as plain `config.json` dictionaries (`hf_config_dict`, `config_from_hf`).
Only the state-dict and config conversion live here; `transformers` is imported only to build
a config object, so converting weights and configs does not need it installed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from lmlab.config import ModelConfig
from lmlab.model import LanguageModel
from lmlab.model.heads import Head
from lmlab.presets import FAMILIES

if TYPE_CHECKING:
    from transformers import PretrainedConfig


# --- transforms: one lmlab tensor ↔ the tensors under one or more HF keys -------------------

@dataclass(frozen=True)
class Transform:
    # (tensor, number of HF keys, config) → their tensors; the config sizes a fused tensor's parts
    to_hf: Callable[[Tensor, int, ModelConfig], list[Tensor]]
    from_hf: Callable[[list[Tensor]], Tensor]


def _stack_rows(tensors: list[Tensor]) -> Tensor:
    return torch.cat(tensors)  # fused projections stack their parts on the output dim


def _transpose_matrix(tensor: Tensor) -> Tensor:
    return tensor.t() if tensor.ndim == 2 else tensor  # a bias has no layout to change


def _fused(rows: Callable[[ModelConfig], tuple[int, ...]]) -> Transform:
    """One fused lmlab projection ↔ one HF Linear per part, of `rows(cfg)` output rows each."""
    return Transform(lambda tensor, parts, cfg: list(tensor.split(rows(cfg))), _stack_rows)


def _qkv_rows(cfg: ModelConfig) -> tuple[int, int, int]:
    queries, keys = cfg.n_heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
    return queries, keys, keys


def _gate_up_rows(cfg: ModelConfig) -> tuple[int, int]:
    return cfg.ffn_dim, cfg.ffn_dim


SAME = Transform(lambda tensor, parts, cfg: [tensor], lambda tensors: tensors[0])
# lmlab's qkv is [q; k; v] (k and v narrower than q under grouped-query attention) and a gated
# MLP's `up` is [gate; value] (MLP.forward chunks it in that order), while Llama and BERT keep
# one Linear per part.
QKV = _fused(_qkv_rows)
GATE_UP = _fused(_gate_up_rows)
# GPT-2's Conv1D stores weights as (in, out), the transpose of nn.Linear.
CONV1D = Transform(lambda tensor, parts, cfg: [_transpose_matrix(tensor)],
                   lambda tensors: _transpose_matrix(tensors[0]))
# One lmlab tensor that HF keeps under several keys; the first is the one HF computes with.
DUPLICATED = Transform(lambda tensor, parts, cfg: [tensor] * parts, lambda tensors: tensors[0])


# --- tables ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Rule:
    theirs: tuple[str, ...]  # HF keys, `{i}` standing for the layer index
    transform: Transform = SAME


def _params(names: tuple[str, ...], ours: str, theirs: tuple[str, ...],
            transform: Transform) -> dict[str, Rule]:
    """Module-level mapping → parameter-level rules; parameter names are the same both sides."""
    return {f"{ours}.{name}": Rule(tuple(f"{module}.{name}" for module in theirs), transform)
            for name in names}


def _weight(ours: str, *theirs: str, transform: Transform = SAME) -> dict[str, Rule]:
    return _params(("weight",), ours, theirs, transform)


def _weight_and_bias(ours: str, *theirs: str, transform: Transform = SAME) -> dict[str, Rule]:
    return _params(("weight", "bias"), ours, theirs, transform)


@dataclass(frozen=True)
class Family:
    model_type: str  # config.json's name for the architecture
    config: Callable[[ModelConfig], dict]  # ModelConfig → the family's config.json entries
    # config.json → ModelConfig fields (the family's switches aside), refusing what differs
    model_fields: Callable[[Mapping], dict]
    heads: tuple[str, ...]  # the lmlab heads of the HF class this family targets
    rules: dict[str, Rule]  # lmlab parameter → its HF keys
    # HF key → the HF key it repeats when embeddings are tied; saved checkpoints omit it.
    tied: dict[str, str]
    # Whether the HF config can hold key/value heads and a head width of their own.
    free_head_sizes: bool = False


# --- config.json, lmlab → HF: what transformers 4.40+ and 5.x both read ----------------------

def _common_config(cfg: ModelConfig) -> dict:
    return dict(
        vocab_size=cfg.vocab_size, tie_word_embeddings=cfg.tie_embeddings,
        initializer_range=cfg.init_std,
        # Special ids belong to the tokenizer, not the architecture; HF's defaults (GPT-2's
        # 50256, say) would point outside a small vocabulary.
        bos_token_id=None, eos_token_id=None, pad_token_id=None,
    )


def _bert_config(cfg: ModelConfig) -> dict:
    return dict(
        hidden_size=cfg.d_model, num_hidden_layers=cfg.n_layers,
        num_attention_heads=cfg.n_heads, intermediate_size=cfg.ffn_dim, hidden_act="gelu",
        hidden_dropout_prob=cfg.dropout, attention_probs_dropout_prob=cfg.dropout,
        max_position_embeddings=cfg.max_seq_len, type_vocab_size=cfg.type_vocab_size,
        layer_norm_eps=cfg.norm_eps,
    )


def _gpt2_config(cfg: ModelConfig) -> dict:
    return dict(
        n_embd=cfg.d_model, n_layer=cfg.n_layers, n_head=cfg.n_heads, n_inner=cfg.ffn_dim,
        activation_function="gelu_new",  # GPT-2's tanh approximation, our "gelu_tanh"
        resid_pdrop=cfg.dropout, embd_pdrop=cfg.dropout, attn_pdrop=cfg.dropout,
        n_positions=cfg.max_seq_len, layer_norm_epsilon=cfg.norm_eps,
    )


def _llama_config(cfg: ModelConfig) -> dict:
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


def _bert_fields(config: Mapping) -> dict:
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


def _gpt2_fields(config: Mapping) -> dict:
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


def _llama_fields(config: Mapping) -> dict:
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


_BLOCK = "backbone.blocks.{i}"
_BERT_LAYER = "bert.encoder.layer.{i}"
_GPT2_LAYER = "transformer.h.{i}"
_LLAMA_LAYER = "model.layers.{i}"

BERT = Family(
    model_type="bert",
    config=_bert_config,
    model_fields=_bert_fields,
    heads=("mlm", "nsp"),
    rules={
        **_weight("backbone.token_embedding", "bert.embeddings.word_embeddings"),
        **_weight("backbone.position_embedding", "bert.embeddings.position_embeddings"),
        **_weight("backbone.token_type_embedding", "bert.embeddings.token_type_embeddings"),
        **_weight_and_bias("backbone.embedding_norm", "bert.embeddings.LayerNorm"),
        **_weight_and_bias(f"{_BLOCK}.attn.qkv", *(f"{_BERT_LAYER}.attention.self.{part}"
                                                   for part in ("query", "key", "value")),
                           transform=QKV),
        **_weight_and_bias(f"{_BLOCK}.attn.out", f"{_BERT_LAYER}.attention.output.dense"),
        **_weight_and_bias(f"{_BLOCK}.attn_norm", f"{_BERT_LAYER}.attention.output.LayerNorm"),
        **_weight_and_bias(f"{_BLOCK}.mlp.up", f"{_BERT_LAYER}.intermediate.dense"),
        **_weight_and_bias(f"{_BLOCK}.mlp.down", f"{_BERT_LAYER}.output.dense"),
        **_weight_and_bias(f"{_BLOCK}.mlp_norm", f"{_BERT_LAYER}.output.LayerNorm"),
        **_weight_and_bias("heads.mlm.transform", "cls.predictions.transform.dense"),
        **_weight_and_bias("heads.mlm.norm", "cls.predictions.transform.LayerNorm"),
        **_weight("heads.mlm.decoder", "cls.predictions.decoder"),
        # HF holds the output bias twice: the decoder's own, and `predictions.bias` tied to it.
        "heads.mlm.decoder.bias": Rule(
            ("cls.predictions.decoder.bias", "cls.predictions.bias"), DUPLICATED),
        **_weight_and_bias("heads.nsp.pooler", "bert.pooler.dense"),
        **_weight_and_bias("heads.nsp.classifier", "cls.seq_relationship"),
        # Fine-tuning heads, one per model. HF's token and span models have no pooler; the
        # sequence and token classifiers share the name `classifier`.
        **_weight_and_bias("heads.classify.pooler", "bert.pooler.dense"),
        **_weight_and_bias("heads.classify.classifier", "classifier"),
        **_weight_and_bias("heads.tag.classifier", "classifier"),
        **_weight_and_bias("heads.span.outputs", "qa_outputs"),
    },
    tied={"cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight",
          "cls.predictions.decoder.bias": "cls.predictions.bias"},
)

GPT2 = Family(
    model_type="gpt2",
    config=_gpt2_config,
    model_fields=_gpt2_fields,
    heads=("lm",),
    rules={
        **_weight("backbone.token_embedding", "transformer.wte"),
        **_weight("backbone.position_embedding", "transformer.wpe"),
        **_weight_and_bias(f"{_BLOCK}.attn_norm", f"{_GPT2_LAYER}.ln_1"),
        # c_attn is fused [q, k, v] like our qkv, so it only needs the Conv1D transpose.
        **_weight_and_bias(f"{_BLOCK}.attn.qkv", f"{_GPT2_LAYER}.attn.c_attn", transform=CONV1D),
        **_weight_and_bias(f"{_BLOCK}.attn.out", f"{_GPT2_LAYER}.attn.c_proj", transform=CONV1D),
        **_weight_and_bias(f"{_BLOCK}.mlp_norm", f"{_GPT2_LAYER}.ln_2"),
        **_weight_and_bias(f"{_BLOCK}.mlp.up", f"{_GPT2_LAYER}.mlp.c_fc", transform=CONV1D),
        **_weight_and_bias(f"{_BLOCK}.mlp.down", f"{_GPT2_LAYER}.mlp.c_proj", transform=CONV1D),
        **_weight_and_bias("backbone.final_norm", "transformer.ln_f"),
        **_weight("heads.lm.decoder", "lm_head"),
    },
    tied={"lm_head.weight": "transformer.wte.weight"},
)

LLAMA = Family(
    model_type="llama",
    config=_llama_config,
    model_fields=_llama_fields,
    heads=("lm",),
    rules={
        **_weight("backbone.token_embedding", "model.embed_tokens"),
        **_weight(f"{_BLOCK}.attn_norm", f"{_LLAMA_LAYER}.input_layernorm"),
        # Both use the half-split rotary layout, so q and k need no permutation.
        **_weight(f"{_BLOCK}.attn.qkv", *(f"{_LLAMA_LAYER}.self_attn.{part}_proj"
                                          for part in ("q", "k", "v")), transform=QKV),
        **_weight(f"{_BLOCK}.attn.out", f"{_LLAMA_LAYER}.self_attn.o_proj"),
        **_weight(f"{_BLOCK}.mlp_norm", f"{_LLAMA_LAYER}.post_attention_layernorm"),
        **_weight(f"{_BLOCK}.mlp.up", f"{_LLAMA_LAYER}.mlp.gate_proj",
                  f"{_LLAMA_LAYER}.mlp.up_proj", transform=GATE_UP),
        **_weight(f"{_BLOCK}.mlp.down", f"{_LLAMA_LAYER}.mlp.down_proj"),
        **_weight("backbone.final_norm", "model.norm"),
        **_weight("heads.lm.decoder", "lm_head"),
    },
    tied={"lm_head.weight": "model.embed_tokens.weight"},
    free_head_sizes=True,
)

# Keyed like presets.FAMILIES, whose switches decide which table fits a config.
HF_FAMILIES: dict[str, Family] = {"bert": BERT, "gpt2": GPT2, "modern": LLAMA}

# The switches HF cannot emulate; eps, dropout, tying and the sizes carry over to any HF config
# (key/value heads and head width only where the family has them).
_ARCHITECTURE_SWITCHES = ("norm", "norm_placement", "positions", "activation", "bias")


# --- family checks ----------------------------------------------------------------------------

def _mismatches(cfg: ModelConfig, family: str) -> list[str]:
    wanted = FAMILIES[family]
    found = [f"{name}={getattr(cfg, name)!r} (needs {wanted[name]!r})"
             for name in _ARCHITECTURE_SWITCHES if getattr(cfg, name) != wanted[name]]
    if bool(cfg.type_vocab_size) != bool(wanted["type_vocab_size"]):
        found.append(f"type_vocab_size={cfg.type_vocab_size} "
                     f"(needs {'> 0' if wanted['type_vocab_size'] else '0'})")
    if not HF_FAMILIES[family].free_head_sizes:
        found += _head_size_mismatches(cfg)
    return found


def _head_size_mismatches(cfg: ModelConfig) -> list[str]:
    found = []
    if cfg.kv_heads != cfg.n_heads:
        found.append(f"n_kv_heads={cfg.n_kv_heads} (needs n_heads)")
    if cfg.head_dim * cfg.n_heads != cfg.d_model:
        found.append(f"head_size={cfg.head_size} (needs d_model / n_heads)")
    return found


def family_of(cfg: ModelConfig) -> str:
    """The HF family whose architecture this config reproduces exactly."""
    reasons = {family: _mismatches(cfg, family) for family in HF_FAMILIES}
    for family, found in reasons.items():
        if not found:
            return family
    details = "; ".join(f"{family}: {', '.join(found)}" for family, found in reasons.items())
    raise ValueError(f"config matches no Hugging Face family ({details})")


def _family(cfg: ModelConfig, family: str) -> Family:
    """The table for `family`, after checking the config really has that architecture — a
    wrong family would still map names, and only the logits would show it."""
    if family not in HF_FAMILIES:
        raise ValueError(f"unknown family {family!r}; choose from {', '.join(HF_FAMILIES)}")
    found = _mismatches(cfg, family)
    if found:
        raise ValueError(f"config does not fit the {family} family: {', '.join(found)}")
    return HF_FAMILIES[family]


# --- conversion -------------------------------------------------------------------------------

_LAYER_INDEX = re.compile(r"(?<=^backbone\.blocks\.)\d+(?=\.)")


def _hf_keys(key: str, family: Family) -> tuple[Rule, list[str]] | None:
    """The rule for one lmlab key and its HF keys with the layer index filled in."""
    layer = _LAYER_INDEX.search(key)
    template = key if layer is None else _LAYER_INDEX.sub("{i}", key)
    rule = family.rules.get(template)
    if rule is None:
        return None
    index = "" if layer is None else layer.group()
    return rule, [name.replace("{i}", index) for name in rule.theirs]


def _listing(keys: Iterable[str], limit: int = 8) -> str:
    ordered = sorted(keys)
    more = f" (+{len(ordered) - limit} more)" if len(ordered) > limit else ""
    return ", ".join(ordered[:limit]) + more


def hf_config_dict(cfg: ModelConfig, family: str, **extra) -> dict:
    """The `config.json` entries, `model_type` included, of the same architecture and sizes:
    plain data, readable by transformers 4.40+ and 5.x alike.

    `extra` is added as is (and may override): what a task model adds to the architecture,
    e.g. `num_labels=3`, or `num_labels=1, problem_type="regression"`.
    """
    table = _family(cfg, family)
    return {"model_type": table.model_type, **_common_config(cfg), **table.config(cfg), **extra}


def hf_config(cfg: ModelConfig, family: str, **extra) -> PretrainedConfig:
    """The transformers config (Bert/GPT2/LlamaConfig) of `hf_config_dict(cfg, family,
    **extra)`, set to SDPA attention unless `extra` says otherwise."""
    from transformers import AutoConfig

    settings = hf_config_dict(cfg, family, **extra)
    model_type = settings.pop("model_type")
    return AutoConfig.for_model(model_type, **{"attn_implementation": "sdpa", **settings})


def config_from_hf(config: Mapping) -> tuple[str, ModelConfig]:
    """(lmlab family, ModelConfig) of a Hugging Face `config.json`, read as transformers reads
    it (absent entries take the config class's defaults). Whatever lmlab cannot reproduce
    exactly is refused with a ValueError naming the entry. Dropout carries over (BERT's
    hidden_dropout_prob, GPT-2's resid_pdrop, Llama's attention_dropout) as the default for
    fine-tuning; inference ignores it."""
    families = {table.model_type: name for name, table in HF_FAMILIES.items()}
    model_type = config.get("model_type")
    if model_type not in families:
        raise ValueError(f"model_type={model_type!r} is not supported; "
                         f"choose from {', '.join(families)}")
    family = families[model_type]
    fields = HF_FAMILIES[family].model_fields(config)
    return family, _without_derivable_sizes(ModelConfig(**{**FAMILIES[family], **fields}))


def _without_derivable_sizes(cfg: ModelConfig) -> ModelConfig:
    """Sizes lmlab would derive anyway set back to None (derived), so an imported config
    equals the one lmlab builds itself."""
    derivable = {
        "n_kv_heads": cfg.kv_heads == cfg.n_heads,
        "head_size": cfg.head_dim * cfg.n_heads == cfg.d_model,
        "ffn_size": cfg.ffn_dim == cfg.with_changes(ffn_size=None).ffn_dim,
    }
    return cfg.with_changes(**{name: None for name, derived in derivable.items() if derived})


def to_hf_state_dict(model: LanguageModel, family: str) -> dict[str, Tensor]:
    """HF-named weights of `model`, ready for `load_state_dict(strict=True)` on the HF class.

    Tied weights appear under each of their HF names, as in HF's own state_dict. Tensors may
    share memory with the model, like `state_dict()`.
    """
    table = _family(model.cfg, family)
    state: dict[str, Tensor] = {}
    unmapped = []
    for key, tensor in model.state_dict().items():
        found = _hf_keys(key, table)
        if found is None:
            unmapped.append(key)
            continue
        rule, names = found
        state.update(zip(names, rule.transform.to_hf(tensor, len(names), model.cfg),
                          strict=True))
    if unmapped:
        raise ValueError(f"lmlab weights with no {family} counterpart: {_listing(unmapped)}")
    return state


def _keys_of_other_heads(table: Family, heads: tuple[str, ...]) -> set[str]:
    return {name for ours, rule in table.rules.items()
            if ours.startswith("heads.") and ours.split(".")[1] not in heads
            for name in rule.theirs}


def _restore_tied(state: Mapping[str, Tensor], table: Family,
                  cfg: ModelConfig) -> dict[str, Tensor]:
    """Fill in the tied keys that saved checkpoints leave out, and refuse a checkpoint whose
    "tied" tensors differ: loading it into a tied model would silently keep only one."""
    state = dict(state)
    if not cfg.tie_embeddings:
        return state
    for alias, source in table.tied.items():
        if alias not in state and source in state:
            state[alias] = state[source]
        elif alias in state and source in state and not torch.equal(state[alias], state[source]):
            raise ValueError(f"{alias} differs from {source}, but the config ties embeddings")
    return state


def from_hf_state_dict(state: Mapping[str, Tensor], cfg: ModelConfig, family: str,
                       heads: Iterable[str] | Mapping[str, Head] | None = None) -> LanguageModel:
    """An lmlab model holding the weights of an HF state dict (or safetensors checkpoint).

    `heads=None` builds the heads of the family's HF class (BertForPreTraining: mlm and nsp);
    naming fewer leaves the others' weights out, or loads e.g. a BertForMaskedLM checkpoint.
    A head whose size the name does not fix is passed built, as to LanguageModel: a
    BertForSequenceClassification checkpoint of 3 labels loads with
    `heads={"classify": make_head("classify", cfg, num_labels=3)}`.
    """
    table = _family(cfg, family)
    model = LanguageModel(cfg, table.heads if heads is None else heads)
    state = _restore_tied(state, table, cfg)
    ours: dict[str, Tensor] = {}
    missing, consumed = set(), set()
    for key in model.state_dict():
        found = _hf_keys(key, table)
        if found is None:
            raise ValueError(f"the {family} family has no weights for lmlab's {key}")
        rule, names = found
        absent = [name for name in names if name not in state]
        missing.update(absent)
        if not absent:
            ours[key] = rule.transform.from_hf([state[name] for name in names])
        consumed.update(names)
    unexpected = set(state) - consumed - _keys_of_other_heads(table, tuple(model.heads))
    if missing or unexpected:
        raise ValueError(f"cannot load {family} weights: missing [{_listing(missing)}], "
                         f"unexpected [{_listing(unexpected)}]")
    model.load_state_dict(ours, strict=True)
    return model
