"""Tiny run directories for the Hugging Face export and import tests: a trained tokenizer of
the family's kind, a preset-tiny model with jittered random weights, saved as lmlab saves runs.
Nothing is downloaded."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from lmlab.config.presets import preset
from lmlab.data.preparation.tokenizer_training import train_tokenizer
from lmlab.data.tokenizer import special_tokens_of
from lmlab.finetune.registry import make_task
from lmlab.model import LanguageModel
from lmlab.model.heads import make_head
from lmlab.objectives.registry import build_objective
from lmlab.runs.checkpoints import checkpoint_name, publish_checkpoint, untied
from lmlab.tasks.finetune_config import FinetuneConfig
from tests.test_hf_parity import jitter

TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "A language model reads text and predicts the words it cannot see.",
    "Paris is the capital of France, and Rome is the capital of Italy.",
    "She sells sea shells by the sea shore; the shells she sells are sea shells.",
] * 20
TOKENIZER_KINDS = {"bert": "wordpiece", "gpt2": "bpe", "modern": "bpe", "modernbert": "bpe"}
# The objective each family's fine-tuned runs were pre-trained with.
PRETRAINED_WITH = {"bert": "mlm", "modernbert": "mlm", "gpt2": "clm", "modern": "clm"}


def tiny_tokenizer(family: str, n_sentinels: int = 0):
    return train_tokenizer(TEXTS, vocab_size=300, n_sentinels=n_sentinels,
                           kind=TOKENIZER_KINDS[family])


def sentinels_for(objective: str) -> int:
    """Span corruption's sentinel tokens, for an objective that uses it."""
    return 4 if "span" in objective else 0


def save_run(out: Path, model: LanguageModel, tokenizer, config: dict) -> Path:
    out.mkdir(parents=True)
    (out / "config.json").write_text(json.dumps({"model": model.cfg.to_dict(), **config}))
    (out / "tokenizer.json").write_text(tokenizer.to_str())
    publish_checkpoint(out / "checkpoints" / checkpoint_name(1), 1,
                       untied(model.state_dict(), model), {"loop": {}})
    return out


def pretrained_run(out: Path, family: str, objective: str, seed: int = 0,
                   **overrides) -> Path:
    """A run as `lmlab pretrain` leaves it, with the heads `objective` trains."""
    tokenizer = tiny_tokenizer(family, sentinels_for(objective))
    cfg = preset(f"{family}-tiny", vocab_size=tokenizer.get_vocab_size(), max_seq_len=64,
                 dropout=0.0, **overrides)
    heads = build_objective(objective, special_tokens_of(tokenizer)).heads
    torch.manual_seed(seed)  # the same weights whichever tests ran before
    model = jitter(LanguageModel(cfg, heads), seed)
    return save_run(out, model, tokenizer, {"train": {"objective": objective}})


def finetuned_run(out: Path, task: str, labels: list | None = None, pooling: str = "cls",
                  attention: str = "bidirectional", family: str = "bert", seed: int = 0,
                  objective: str | None = None, head_options: dict | None = None) -> Path:
    """A run as `lmlab finetune` leaves it: a task head on a backbone pre-trained with
    `objective` (default: the family's own, PRETRAINED_WITH); `head_options`: the head's
    options as saved (default: those lmlab finetune gives the task)."""
    tokenizer = tiny_tokenizer(family, sentinels_for(objective or ""))
    cfg = preset(f"{family}-tiny", vocab_size=tokenizer.get_vocab_size(), max_seq_len=64,
                 dropout=0.0)
    labels = labels or []
    settings = FinetuneConfig(task=task, train="train.tsv", validation="validation.tsv",
                              attention=attention, pooling=pooling, max_len=cfg.max_seq_len)
    built = make_task(settings, labels or None)  # the head lmlab finetune gives the task
    head = built.head
    options = built.head_options() if head_options is None else head_options
    torch.manual_seed(seed)  # the same weights whichever tests ran before
    model = jitter(LanguageModel(cfg, {head: make_head(head, cfg, **options)}), seed)
    config = {"train": settings.to_dict(),
              "pretraining": {"objective": objective or PRETRAINED_WITH[family]},
              "task": {"name": task, "labels": labels}, "heads": {head: options}}
    return save_run(out, model, tokenizer, config)


def random_ids(count: int, length: int, low: int, high: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(low, high, (count, length), generator=torch.Generator().manual_seed(seed))
