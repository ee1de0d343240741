"""A run directory loaded for use: model, tokenizer, special tokens and what it was trained for.

`load(RUN)` reads `config.json`, `tokenizer.json` and a verified checkpoint (the best one by
validation loss unless asked otherwise). Whether the model may generate, fill masks or score
follows from the objective it was trained with, recorded in the run's configuration.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer

from lmlab.config import ModelConfig
from lmlab.data.errors import DataError
from lmlab.data.tokenizer import load_tokenizer, special_tokens_of
from lmlab.infer.embed import embed
from lmlab.infer.fill_mask import fill_mask
from lmlab.infer.generate import generate, stream
from lmlab.model import LanguageModel
from lmlab.objectives.base import SpecialTokens
from lmlab.objectives.registry import build_objective
from lmlab.train.checkpoint import CheckpointError, list_checkpoints, load_checkpoint
from lmlab.train.run_dir import CONFIG

# Base objectives by the attention they train: causal ones teach left-to-right prediction,
# prefix ones a bidirectional prompt followed by causal generation, masked ones only
# bidirectional filling.
CAUSAL_OBJECTIVES = frozenset({"clm"})
PREFIX_OBJECTIVES = frozenset({"prefix", "span"})
MASKED_OBJECTIVES = frozenset({"mlm", "mlm+nsp", "mntp"})


class RunLoadError(ValueError):
    """A run directory that cannot be loaded, stated in one line."""


def base_objectives(spec: str) -> list[str]:
    """`mix:clm=1,mlm=15` → ["clm", "mlm"]; `alternate:clm,mlm@1000` → ["clm", "mlm"]."""
    kind, _, rest = spec.partition(":")
    if kind == "mix" and rest:
        return [part.partition("=")[0].strip() for part in rest.split(",")]
    if kind == "alternate" and rest:
        return [name.strip() for name in rest.partition("@")[0].split(",")]
    return [spec]


@dataclass
class Pretrained:
    """A trained model ready for use, in eval mode."""

    model: LanguageModel
    tokenizer: Tokenizer | None
    special: SpecialTokens
    objective: str  # the training objective spec, e.g. "mlm" or "mix:clm=1,mlm=15"
    run: Path | None = None
    checkpoint: Path | None = None

    @property
    def objectives(self) -> list[str]:
        return base_objectives(self.objective)

    @property
    def can_generate(self) -> bool:
        """Trained to predict left to right (causal or after a bidirectional prefix)."""
        return bool(set(self.objectives) & (CAUSAL_OBJECTIVES | PREFIX_OBJECTIVES))

    @property
    def can_fill_mask(self) -> bool:
        return "mlm" in self.model.heads or "mntp" in self.objectives

    @property
    def fill_mask_head(self) -> tuple[str, int]:
        """(head, shift): the head that predicts a masked token, and how many positions
        before the mask it does so (masked next-token models predict it from the one before)."""
        return ("mlm", 0) if "mlm" in self.model.heads else ("lm", 1)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def max_seq_len(self) -> int:
        return self.model.cfg.max_seq_len

    def score(self, texts, rule: str | None = None, **options):
        """Each text's log-likelihood in nats, as `DocumentScores` naming the rule: summed
        log-probabilities for causal and prefix models, pseudo-log-likelihood for masked and
        span models (see lmlab.eval.rules; options as for lmlab.eval.evaluate.score_texts)."""
        from lmlab.eval.evaluate import score_texts

        return score_texts(self, texts, rule, **options)

    def require_tokenizer(self) -> Tokenizer:
        if self.tokenizer is None:
            raise RunLoadError(f"{self.run}: the run has no tokenizer.json, so it cannot read "
                               "text; pass token ids instead")
        return self.tokenizer

    # Texts may be strings or, for runs without a tokenizer, lists of token ids.

    def fill_mask(self, texts, top_k: int = 5, batch_size: int = 32):
        """Top-k candidates with probabilities for each [MASK] (see infer/fill_mask.py)."""
        return fill_mask(self, texts, top_k, batch_size)

    def generate(self, prompts, max_new_tokens: int = 50, **options):
        """Continue or infill prompts (see infer/generate.py for the options)."""
        return generate(self, prompts, max_new_tokens, **options)

    def stream(self, prompt, max_new_tokens: int = 50, **options):
        """Like `generate` for one prompt, yielding text pieces as they are produced."""
        return stream(self, prompt, max_new_tokens, **options)

    def embed(self, texts, pooling: str = "mean", normalize: bool = False,
              batch_size: int = 32):
        """One vector per text, mean or [CLS] pooled (see infer/embed.py)."""
        return embed(self, texts, pooling, normalize, batch_size)


def _pick_checkpoint(run: Path, which: str) -> Path:
    found = list_checkpoints(run / "checkpoints")
    if not found:
        raise RunLoadError(f"{run}: no complete checkpoint in {run / 'checkpoints'}; the run "
                           "has not saved one yet")
    if which == "last":
        return found[-1]
    if which == "best":
        state_best = _best_name(run)
        match = [p for p in found if p.name == state_best]
        return match[0] if match else found[-1]
    chosen = Path(which)
    if not chosen.is_absolute():
        chosen = run / "checkpoints" / which
    if chosen not in found:
        names = ", ".join(p.name for p in found)
        raise RunLoadError(f"{run}: no checkpoint {which!r}; choose best, last or one of {names}")
    return chosen


def _best_name(run: Path) -> str:
    """The best checkpoint's name, as the last checkpoint's loop state recorded it."""
    last = list_checkpoints(run / "checkpoints")[-1]
    state = torch.load(last / "state.pt", weights_only=True, map_location="cpu")
    return state.get("loop", {}).get("best_checkpoint", "")


def _usable_device(device: str | torch.device) -> torch.device:
    try:
        device = torch.device(device)
    except RuntimeError:
        raise RunLoadError(f"unknown device {str(device)!r}; use cpu, cuda or cuda:N") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RunLoadError("--device cuda was asked for, but this machine has no usable GPU")
    return device


def load(run: str | Path, checkpoint: str = "best", device: str | torch.device = "cpu",
         special: SpecialTokens | None = None) -> Pretrained:
    """Load a run directory written by `lmlab pretrain`.

    `checkpoint` is "best" (lowest validation loss; the last one when none was marked),
    "last", or a checkpoint name such as "step-00001000". `special` gives the special tokens
    of a run trained on token ids without a tokenizer.json (by default lmlab's layout with
    no sentinels).
    """
    run = Path(run)
    if not run.is_dir():
        raise RunLoadError(f"{run}: no such run directory")
    config_path = run / CONFIG
    if not config_path.is_file():
        raise RunLoadError(f"{run}: not an lmlab run (no {CONFIG})")
    try:
        config = json.loads(config_path.read_text())
        model_cfg = ModelConfig(**config["model"])
        objective = config["train"]["objective"]
    except (json.JSONDecodeError, KeyError, TypeError) as error:
        raise RunLoadError(f"{config_path}: unreadable run configuration ({error})") from None
    device = _usable_device(device)
    tokenizer_path = run / "tokenizer.json"
    tokenizer = None
    if tokenizer_path.is_file():
        try:
            tokenizer = load_tokenizer(tokenizer_path)
        except DataError as error:
            raise RunLoadError(str(error)) from None
        special = special_tokens_of(tokenizer, str(tokenizer_path))
    elif special is None:
        special = SpecialTokens.layout(model_cfg.vocab_size, 0)
    chosen = _pick_checkpoint(run, checkpoint)
    try:
        heads = build_objective(objective, special).heads  # as training built the model
    except ValueError as error:
        raise RunLoadError(f"{config_path}: {error}") from None
    model = LanguageModel(model_cfg, heads=heads)
    try:
        load_checkpoint(chosen, model)
    except CheckpointError as error:
        raise RunLoadError(str(error)) from None
    model.to(device).eval()
    return Pretrained(model, tokenizer, special, objective, run, chosen)
