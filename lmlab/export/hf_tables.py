"""Hugging Face ↔ lmlab weight tables, one per family, in the spirit of torchtitan's and
litgpt's converters: each maps an lmlab parameter (`{i}` standing for the layer index) to the
Hugging Face key(s) holding it, and names the transform between them (`hf_transforms`): the
same tensor, GPT-2's transposed Conv1D layout, or one fused lmlab projection split into
several HF ones (q/k/v, gate/up). lmlab.export.hf converts with them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from lmlab.config import ModelConfig
from lmlab.export import hf_config_entries as entries
from lmlab.export.hf_transforms import CONV1D, DUPLICATED, GATE_UP, QKV, SAME, Transform


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
        # Fine-tuning heads, one per model. HF's token and question-answering models have no
        # pooler; the sequence and token classifiers share the name `classifier`.
        **_weight_and_bias("heads.classify.pooler", "bert.pooler.dense"),
        **_weight_and_bias("heads.classify.classifier", "classifier"),
        **_weight_and_bias("heads.tag.classifier", "classifier"),
        **_weight_and_bias("heads.answer.outputs", "qa_outputs"),
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
        # Fine-tuning heads: GPT2ForSequenceClassification (a bias-free `score`),
        # GPT2ForTokenClassification, GPT2ForQuestionAnswering.
        **_weight("heads.classify.classifier", "score"),
        **_weight_and_bias("heads.tag.classifier", "classifier"),
        **_weight_and_bias("heads.answer.outputs", "qa_outputs"),
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
        # Fine-tuning heads: LlamaForSequenceClassification (a bias-free `score`),
        # LlamaForTokenClassification (`score` with a bias), LlamaForQuestionAnswering (whose
        # backbone is `transformer.`, not `model.`: lmlab.export.targets renames it).
        **_weight("heads.classify.classifier", "score"),
        **_weight_and_bias("heads.tag.classifier", "score"),
        **_weight_and_bias("heads.answer.outputs", "qa_outputs"),
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
        **{key: rule for name in ("classify.pooler", "tag.transform", "answer.transform")
           for key, rule in {**_weight_and_bias(f"heads.{name}.dense", "head.dense"),
                             **_weight(f"heads.{name}.norm", "head.norm")}.items()},
        **_weight_and_bias("heads.classify.classifier", "classifier"),
        **_weight_and_bias("heads.tag.classifier", "classifier"),
        **_weight_and_bias("heads.answer.outputs", "classifier"),
    },
    tied={"decoder.weight": "model.embeddings.tok_embeddings.weight"},
)

# Keyed like presets.FAMILIES, whose switches decide which table fits a config.
HF_FAMILIES: dict[str, Family] = {"bert": BERT, "gpt2": GPT2, "modern": LLAMA,
                                  "modernbert": MODERNBERT}

