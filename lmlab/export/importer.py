"""`lmlab import HF_DIR --out RUN`: a Hugging Face model as an lmlab run, which every command
reads like one lmlab trained.

BERT checkpoints come with or without the `bert.` prefix (BertModel saves none), with or
without the pre-training heads, pooler and legacy `position_ids` buffer; GPT-2 and Llama ones
likewise. The run's objective says how the model learnt to read: masked LM with next-sentence
prediction for BERT, causal LM for the decoders, or for a directory lmlab exported, the
objective its run was trained with. Task heads (a classifier, QA outputs) are left out:
fine-tune the imported model with `lmlab finetune`. A sentence-transformers directory's
pooling and normalisation are recorded for `lmlab embed` (see st_pooling.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from lmlab.atomic import atomic_directory, check_replaceable
from lmlab.config import ModelConfig
from lmlab.data.tokenizer import special_tokens_of
from lmlab.export.hf import HF_FAMILIES, config_from_hf, from_hf_state_dict, to_hf_state_dict
from lmlab.export.hf_files import HFImportError, HFModel, read_gguf, read_hf_directory
from lmlab.export.st_pooling import read_embedding
from lmlab.model import LanguageModel
from lmlab.objectives.registry import build_objective
from lmlab.runs.checkpoints import checkpoint_name, publish_checkpoint, untied
from lmlab.runs.layout import CHECKPOINTS, CONFIG, seen_from_run, write_tokenizer
from lmlab.runs.schema import (
    Embedding,
    ImportRecord,
    RunConfig,
    RunConfigError,
    read_run_config,
    write_run_config,
)

# Buffers some checkpoints carry that hold no learnt weight: BERT's position ids, old GPT-2
# attention masks, rotary frequencies.
BUFFERS = re.compile(r"(^|\.)(position_ids|attn\.bias|attn\.masked_bias|rotary_emb\.inv_freq)$")
# The one HF key that shows a pre-training head is in a checkpoint.
HEAD_MARKERS = {"mlm": "cls.predictions.transform.dense.weight",
                "nsp": "cls.seq_relationship.weight", "lm": "lm_head.weight"}
# Task heads left out of an import, by their HF key prefix.
TASK_HEADS = ("classifier.", "qa_outputs.", "score.")
# ModernBERT's MLM head transform; without classifier_bias its dense layer has no bias, which
# lmlab's head computes as a zero one.
MODERNBERT_MLM = "head.dense.weight"


# How each family learnt to read, when the directory does not say (the decoders: clm). BERT
# was pre-trained with MLM + NSP on `[CLS] A [SEP] B [SEP]`, and reads text framed so whichever
# of its heads the checkpoint kept.
IMPORTED_OBJECTIVES = {"bert": "mlm+nsp", "modernbert": "mlm"}


@dataclass
class Imported:
    out: Path
    family: str
    objective: str
    heads: tuple[str, ...]
    left_out: list[str]  # HF weights not imported (task heads)
    embedding: Embedding | None = None  # how a sentence-transformers model pools, as recorded
    embedding_note: str | None = None  # why a sentence-transformers pooling was not recorded


def _prefix_and_tops(family: str) -> tuple[str, set[str]]:
    """The prefix HF's head classes put before the backbone ("bert.") and the backbone's own
    top-level names (embeddings, encoder, pooler), read off the family's weight table."""
    keys = [name for rule in HF_FAMILIES[family].rules.values() for name in rule.theirs]
    prefix = HF_FAMILIES[family].rules["backbone.token_embedding.weight"].theirs[0]
    prefix = prefix.split(".")[0] + "."
    return prefix, {k[len(prefix):].split(".")[0] for k in keys if k.startswith(prefix)}


def normalised_keys(state: dict[str, Tensor], family: str) -> dict[str, Tensor]:
    """Buffers dropped, and the backbone prefix added where a bare model saved none."""
    prefix, tops = _prefix_and_tops(family)
    found = {}
    for key, tensor in state.items():
        if BUFFERS.search(key):
            continue
        found[prefix + key if key.split(".")[0] in tops else key] = tensor
    return found


def heads_in(state: dict[str, Tensor], family: str, cfg: ModelConfig) -> tuple[str, ...]:
    """The pre-training heads the checkpoint holds (the one the objective needs first)."""
    if family == "modernbert":  # its task classes hold `head` too, beside a classifier
        return ("mlm",) if MODERNBERT_MLM in state and "classifier.weight" not in state else ()
    if family == "bert":
        heads = [h for h in ("mlm", "nsp") if HEAD_MARKERS[h] in state]
        return tuple(heads) if "mlm" in heads else ()  # NSP alone is no objective of ours
    return ("lm",) if cfg.tie_embeddings or HEAD_MARKERS["lm"] in state else ()


def _check_shapes(state: dict[str, Tensor], cfg: ModelConfig, family: str,
                  heads: tuple[str, ...]) -> None:
    """Name the first tensor whose shape config.json contradicts, before any conversion."""
    with torch.device("meta"):
        expected = to_hf_state_dict(LanguageModel(cfg, heads), family)
    for key, tensor in expected.items():
        if key in state and state[key].shape != tensor.shape:
            raise HFImportError(f"weights do not match config.json: {key} is "
                                f"{tuple(state[key].shape)} in the checkpoint but "
                                f"{tuple(tensor.shape)} by the config")


def _check_vocabulary(hf: HFModel, cfg: ModelConfig) -> None:
    size = hf.tokenizer.get_vocab_size(with_added_tokens=True)
    if size > cfg.vocab_size:
        raise HFImportError(f"the tokenizer has {size} tokens but the embeddings only "
                            f"{cfg.vocab_size} rows; they are not from the same model")


def convert(hf: HFModel) -> tuple[str, LanguageModel, str, list[str]]:
    """(family, model with the HF weights, objective spec, HF keys left out)."""
    try:
        family, cfg = config_from_hf(hf.config)
    except (ValueError, TypeError, AttributeError) as error:  # values of the wrong type too
        raise HFImportError(f"{hf.source}: config.json does not describe a model lmlab "
                            f"builds ({error})") from None
    _check_vocabulary(hf, cfg)
    state = normalised_keys(hf.state, family)
    heads = heads_in(state, family, cfg)
    _check_shapes(state, cfg, family, heads)
    task_keys = TASK_HEADS + (("head.",) if family == "modernbert" and not heads else ())
    left_out = sorted({key.split(".")[0] for key in state if key.startswith(task_keys)})
    state = {key: tensor for key, tensor in state.items() if not key.startswith(task_keys)}
    if "mlm" in heads and family == "modernbert":
        state.setdefault("head.dense.bias", torch.zeros(cfg.d_model))
    try:
        model = from_hf_state_dict(state, cfg, family, heads)
    except ValueError as error:
        raise HFImportError(f"{hf.source}: {error}") from None
    objective = hf.objective or IMPORTED_OBJECTIVES.get(family, "clm")
    _check_objective(hf, objective)
    return family, model, objective, left_out


def _check_objective(hf: HFModel, objective: str) -> None:
    """The run's objective must build with the tokenizer's special tokens, or the run would
    be written and then refused by every command that loads it."""
    try:
        build_objective(objective, special_tokens_of(hf.tokenizer, hf.source, hf.roles))
    except ValueError as error:
        raise HFImportError(f"{hf.source}: {error}") from None


def _earlier_import(out: Path) -> bool:
    try:
        return read_run_config(out / CONFIG).imported is not None
    except (OSError, RunConfigError):
        return False


def import_hf(source: str | Path, out: str | Path, allow_pickle: bool = False) -> Imported:
    """Write the HF model at `source` (a directory, or a .gguf file) as the run `out`."""
    source, out = Path(source), Path(out)
    check_replaceable(out, _earlier_import(out), "an imported run")
    hf = read_gguf(source) if source.suffix == ".gguf" else read_hf_directory(source,
                                                                            allow_pickle)
    family, model, objective, left_out = convert(hf)
    embedding, note = (None, None) if source.suffix == ".gguf" else read_embedding(
        source, model.cfg.max_seq_len)
    architectures = hf.config.get("architectures")
    with atomic_directory(out) as staging:
        write_run_config(staging / CONFIG, RunConfig(
            model.cfg, {"objective": objective}, heads=dict.fromkeys(model.heads, {}),
            special_tokens=hf.roles,
            tokenizer_sha256=write_tokenizer(staging, hf.tokenizer.to_str()),
            imported=ImportRecord(seen_from_run(out, source),
                                  None if architectures is None else tuple(architectures),
                                  family),
            embedding=embedding))
        publish_checkpoint(staging / CHECKPOINTS / checkpoint_name(0), 0,
                           untied(model.state_dict(), model), {"loop": {}},
                           {"imported_from": source.name})
    return Imported(out, family, objective, tuple(model.heads), left_out, embedding, note)
