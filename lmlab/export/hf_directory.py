"""A run as the files of a Hugging Face model directory, written into a staging folder:

    config.json             architecture, sizes, special-token ids, labels
    model.safetensors       HF-named weights, tied tensors stored once
    generation_config.json  causal models
    tokenizer.json, tokenizer_config.json, special_tokens_map.json

The sentence-transformers format is this directory with its modules beside it.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save

from lmlab.export.hf import HF_FAMILIES, hf_config_dict, to_hf_state_dict
from lmlab.export.targets import Target
from lmlab.export.tokenizer_files import write_tokenizer_files
from lmlab.model import LanguageModel
from lmlab.runs import Run


def special_ids(run: Run, target: Target) -> dict:
    special = run.special
    return {"pad_token_id": target.pad_id(special), "bos_token_id": special.bos,
            "eos_token_id": special.eos}


def _model_config(run: Run, target: Target) -> dict:
    config = hf_config_dict(run.model.cfg, target.family, **special_ids(run, target),
                            **target.config)
    return {**config, "architectures": [target.architecture], "torch_dtype": "float32"}


def _weights(run: Run, target: Target) -> dict:
    """HF-named tensors, each tie stored once (HF restores the alias when loading)."""
    weights = target.weights or (lambda model: to_hf_state_dict(model, target.family,
                                                                target.heads))
    state = weights(run.model.float())
    if run.model.cfg.tie_embeddings:
        for alias in HF_FAMILIES[target.family].tied:
            state.pop(alias, None)
    if not target.heads:  # the bare backbone: its keys alone, without their prefix
        token_embedding = HF_FAMILIES[target.family].rules["backbone.token_embedding.weight"]
        prefix = token_embedding.theirs[0].split(".")[0] + "."
        state = {key.removeprefix(prefix): tensor for key, tensor in state.items()
                 if key.startswith(prefix)}
        if target.architecture == "BertModel":
            state = {**_bert_pooler(run.model), **state}
    return {key: tensor.detach().contiguous().cpu() for key, tensor in state.items()}


def _bert_pooler(model: LanguageModel) -> dict[str, torch.Tensor]:
    """The pooler a bare BertModel is built with, which loading it expects (else transformers
    draws it at random and reports it missing): the run's own where a next-sentence or
    classification head trained one, else zeros, as none was trained (embeddings are read
    from the token states, never from it)."""
    trained = {key.removeprefix("bert."): tensor
               for key, tensor in to_hf_state_dict(model, "bert").items()
               if key.startswith("bert.pooler.")}
    width = model.cfg.d_model
    return trained or {"pooler.dense.weight": torch.zeros(width, width),
                       "pooler.dense.bias": torch.zeros(width)}


def _generation_config(run: Run, target: Target) -> dict:
    return {**{key: value for key, value in special_ids(run, target).items()
               if value is not None},
            "do_sample": False}


def write_hf_directory(run: Run, target: Target, staging: Path, framed: bool,
                       pair_framed: bool) -> None:
    """The model's files in `staging`; `framed`: the tokenizer adds the tokens lmlab frames
    a text with (encoders, embeddings), else it keeps its own (a prompt to continue)."""
    files = {"config.json": _model_config(run, target)}
    if target.causal:
        files["generation_config.json"] = _generation_config(run, target)
    for name, content in files.items():
        (staging / name).write_text(json.dumps(content, indent=2) + "\n")
    # Through a Python write, so that a full disk surfaces as the OSError it is.
    (staging / "model.safetensors").write_bytes(save(_weights(run, target),
                                                     metadata={"format": "pt"}))
    tokenizer, names = run.require_tokenizer(), dict(run.config.special_token_names)
    if target.padding is not None:  # in place of the tokenizer's own
        names["pad"] = tokenizer.id_to_token(target.padding)
    write_tokenizer_files(staging, tokenizer, names, run.special, run.max_seq_len,
                          token_types=bool(run.model.cfg.type_vocab_size),
                          pair_framed=pair_framed, framed=framed)
