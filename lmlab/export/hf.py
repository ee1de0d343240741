"""Hugging Face ↔ lmlab weights and configs: one name table per family, in the spirit of
torchtitan's and litgpt's converters.

A table maps each lmlab parameter (`{i}` standing for the layer index) to the Hugging Face
key(s) holding it, and names the transform between them (`hf_transforms`): the same tensor,
GPT-2's transposed Conv1D layout, or one fused lmlab projection split into several HF ones
(q/k/v, gate/up).

    bert   ↔ BertForPreTraining (or BertForMaskedLM / BertForNextSentencePrediction), and
             fine-tuned: BertForSequenceClassification, BertForTokenClassification,
             BertForQuestionAnswering
    gpt2   ↔ GPT2LMHeadModel
    modern ↔ LlamaForCausalLM
    modernbert ↔ ModernBertForMaskedLM, and fine-tuned: ModernBertForSequenceClassification,
             ModernBertForTokenClassification, ModernBertForQuestionAnswering

Configs go both ways as plain `config.json` dictionaries (`hf_config_dict`, `config_from_hf`;
each family's entries are in `hf_config_entries`). `transformers` is imported only to build a
config object, so converting weights and configs does not need it installed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from lmlab.config import ModelConfig
from lmlab.export import hf_config_entries as entries
from lmlab.export.hf_transforms import CONV1D, DUPLICATED, GATE_UP, QKV, SAME, Transform
from lmlab.model import LanguageModel
from lmlab.model.heads import Head
from lmlab.presets import FAMILIES

if TYPE_CHECKING:
    from transformers import PretrainedConfig


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


_BLOCK = "backbone.blocks.{i}"
_BERT_LAYER = "bert.encoder.layer.{i}"
_GPT2_LAYER = "transformer.h.{i}"
_LLAMA_LAYER = "model.layers.{i}"
_MODERNBERT_LAYER = "model.layers.{i}"

BERT = Family(
    model_type="bert",
    config=entries.bert_entries,
    model_fields=entries.bert_fields,
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
    config=entries.gpt2_entries,
    model_fields=entries.gpt2_fields,
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
    config=entries.llama_entries,
    model_fields=entries.llama_fields,
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

MODERNBERT = Family(
    model_type="modernbert",
    config=entries.modernbert_entries,
    model_fields=entries.modernbert_fields,
    heads=("mlm",),
    rules={
        **_weight("backbone.token_embedding", "model.embeddings.tok_embeddings"),
        **_weight("backbone.embedding_norm", "model.embeddings.norm"),
        # Layer 0 has no attention norm on either side. Wqkv is fused [q, k, v] like our qkv;
        # Wi is [input, gate], the input half activated, as our `up` is [gate, value].
        **_weight(f"{_BLOCK}.attn_norm", f"{_MODERNBERT_LAYER}.attn_norm"),
        **_weight(f"{_BLOCK}.attn.qkv", f"{_MODERNBERT_LAYER}.attn.Wqkv"),
        **_weight(f"{_BLOCK}.attn.out", f"{_MODERNBERT_LAYER}.attn.Wo"),
        **_weight(f"{_BLOCK}.mlp_norm", f"{_MODERNBERT_LAYER}.mlp_norm"),
        **_weight(f"{_BLOCK}.mlp.up", f"{_MODERNBERT_LAYER}.mlp.Wi"),
        **_weight(f"{_BLOCK}.mlp.down", f"{_MODERNBERT_LAYER}.mlp.Wo"),
        **_weight("backbone.final_norm", "model.final_norm"),
        **_weight_and_bias("heads.mlm.transform", "head.dense"),
        **_weight("heads.mlm.norm", "head.norm"),
        **_weight_and_bias("heads.mlm.decoder", "decoder"),
        # Fine-tuning heads, one per model, each reading through `head` (dense → GELU → norm).
        **{key: rule for name in ("classify.pooler", "tag.transform", "span.transform")
           for key, rule in {**_weight_and_bias(f"heads.{name}.dense", "head.dense"),
                             **_weight(f"heads.{name}.norm", "head.norm")}.items()},
        **_weight_and_bias("heads.classify.classifier", "classifier"),
        **_weight_and_bias("heads.tag.classifier", "classifier"),
        **_weight_and_bias("heads.span.outputs", "classifier"),
    },
    tied={"decoder.weight": "model.embeddings.tok_embeddings.weight"},
)

# Keyed like presets.FAMILIES, whose switches decide which table fits a config.
HF_FAMILIES: dict[str, Family] = {"bert": BERT, "gpt2": GPT2, "modern": LLAMA,
                                  "modernbert": MODERNBERT}

# The switches HF cannot emulate; eps, dropout, tying and the sizes carry over to any HF config
# (key/value heads and head width only where the family has them). A switch a family leaves
# out must stay at ModelConfig's default (the recipe switches: no HF family has them).
_ARCHITECTURE_SWITCHES = ("norm", "norm_placement", "positions", "activation", "bias",
                          "qk_norm", "logit_softcap", "embedding_norm", "head_transform")
_DEFAULTS = {f.name: f.default for f in fields(ModelConfig)}


# --- family checks ----------------------------------------------------------------------------

def _mismatches(cfg: ModelConfig, family: str) -> list[str]:
    wanted = {**_DEFAULTS, **FAMILIES[family]}
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
    return {"model_type": table.model_type, **entries.common_entries(cfg), **table.config(cfg),
            **extra}


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
