"""Hugging Face ↔ lmlab weights and configs: one name table per family, in the spirit of
torchtitan's and litgpt's converters.

A table maps each lmlab parameter (`{i}` standing for the layer index) to the Hugging Face
key(s) holding it, and names the transform between them (`hf_transforms`): the same tensor,
GPT-2's transposed Conv1D layout, or one fused lmlab projection split into several HF ones
(q/k/v, gate/up).

    bert   ↔ BertForPreTraining (or BertForMaskedLM / BertForNextSentencePrediction), and
             fine-tuned: BertForSequenceClassification, BertForTokenClassification,
             BertForQuestionAnswering
    gpt2   ↔ GPT2LMHeadModel, and fine-tuned: GPT2ForSequenceClassification,
             GPT2ForTokenClassification, GPT2ForQuestionAnswering
    modern ↔ LlamaForCausalLM, and fine-tuned: LlamaForSequenceClassification,
             LlamaForTokenClassification, LlamaForQuestionAnswering
    modernbert ↔ ModernBertForMaskedLM, and fine-tuned: ModernBertForSequenceClassification,
             ModernBertForTokenClassification, ModernBertForQuestionAnswering

Configs go both ways as plain `config.json` dictionaries (`hf_config_dict`, `config_from_hf`;
each family's entries are in `hf_config_entries`). `transformers` is imported only to build a
config object, so converting weights and configs does not need it installed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import fields
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from lmlab.config import ModelConfig
from lmlab.config.presets import FAMILIES
from lmlab.export import hf_config_entries as entries
from lmlab.export.hf_tables import HF_FAMILIES, Family, Rule
from lmlab.model import LanguageModel
from lmlab.model.heads import Head

if TYPE_CHECKING:
    from transformers import PretrainedConfig


# The switches HF cannot emulate; eps, dropout, tying and the sizes carry over to any HF config
# (key/value heads and head width only where the family has them). A switch a family leaves
# out must stay at ModelConfig's default (the recipe switches: no HF family has them).
_ARCHITECTURE_SWITCHES = ("norm", "norm_placement", "positions", "activation", "bias",
                          "qk_norm", "logit_softcap", "embedding_norm", "head_transform",
                          "unet_skips", "value_embeddings", "bigram_hash")
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


def to_hf_state_dict(model: LanguageModel, family: str,
                     heads: Iterable[str] | None = None) -> dict[str, Tensor]:
    """HF-named weights of `model`, ready for `load_state_dict(strict=True)` on the HF class;
    of the backbone and `heads` (None: every head the model has), the other heads left out.

    Tied weights appear under each of their HF names, as in HF's own state_dict. Tensors may
    share memory with the model, like `state_dict()`.
    """
    table = _family(model.cfg, family)
    left_out = set() if heads is None else set(model.heads) - set(heads)
    state: dict[str, Tensor] = {}
    unmapped = []
    for key, tensor in model.state_dict().items():
        if key.startswith("heads.") and key.split(".")[1] in left_out:
            continue
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
