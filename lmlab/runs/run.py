"""A run directory loaded for use: `load_run(RUN) -> Run`, a plain record of the model, its
tokenizer and special tokens, the objective it was trained with (rebuilt from the saved
configuration) and that configuration. Every consumer of runs (inference, evaluation and
what sits on top of them) reads runs through here."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer

from lmlab.data.errors import DataError
from lmlab.data.special_tokens import SpecialTokens
from lmlab.data.tokenizer import load_tokenizer, special_tokens_of, word_start_table
from lmlab.model import LanguageModel
from lmlab.model.heads import Head, make_head
from lmlab.model.sharing import merge_sharing
from lmlab.objectives.base import Objective
from lmlab.objectives.registry import build_objective
from lmlab.runs.checkpoints import (
    BEST,
    CheckpointError,
    DamagedCheckpoint,
    list_checkpoints,
    load_weights,
    read_manifest,
    read_state,
    sha256_of,
    verify_checkpoint,
)
from lmlab.runs.layout import CHECKPOINTS, CONFIG, TOKENIZER
from lmlab.runs.schema import RunConfig, RunConfigError, RunTask, read_run_config


class RunLoadError(ValueError):
    """A run directory that cannot be loaded, stated in one line; `damaged` is the damaged
    checkpoint behind it, if that was the cause, for commands whose option to pick another
    checkpoint is not --checkpoint."""

    def __init__(self, message: str, damaged: DamagedCheckpoint | None = None) -> None:
        super().__init__(message)
        self.damaged = damaged


@dataclass
class Run:
    """A trained model ready for use, in eval mode."""

    model: LanguageModel
    tokenizer: Tokenizer | None
    special: SpecialTokens
    objective: Objective  # as training built it; says what the model can do
    spec: str  # the objective as the user wrote it, e.g. "mix:clm=1,mlm=15"
    path: Path | None = None
    checkpoint: Path | None = None
    config: RunConfig | None = None  # the run's config.json; None: the model's, untrained

    def __post_init__(self) -> None:
        if self.config is None:
            self.config = RunConfig(self.model.cfg, {"objective": self.spec})

    @property
    def task(self) -> RunTask | None:
        """What the run was fine-tuned for; None for a pre-trained (or imported) run."""
        return self.config.task

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def max_seq_len(self) -> int:
        return self.model.cfg.max_seq_len

    @classmethod
    def of(cls, model: LanguageModel, spec: str, special: SpecialTokens,
           tokenizer: Tokenizer | None = None) -> Run:
        """A model built in Python, taken as trained with the objective `spec`."""
        return cls(model, tokenizer, special, build_objective(spec, special), spec)

    def require_tokenizer(self) -> Tokenizer:
        if self.tokenizer is None:
            raise RunLoadError(f"{self.path}: the run has no {TOKENIZER}, so it cannot read "
                               "text; pass token ids instead")
        return self.tokenizer


def pick_checkpoint(run: Path, which: str) -> Path:
    """`best` (the best validation the run marked: lowest loss in pre-training, highest main
    metric in fine-tuning; the last one when none was marked), `last`, or a checkpoint's name."""
    found = list_checkpoints(run / CHECKPOINTS)
    if not found:
        raise RunLoadError(f"{run}: no complete checkpoint in {run / CHECKPOINTS}; the run "
                           "has not saved one yet")
    if which == "last":
        return found[-1]
    if which == "best":
        state_best = _best_name(found[-1])
        match = [p for p in found if p.name == state_best]
        return match[0] if match else found[-1]
    chosen = Path(which)
    if not chosen.is_absolute():
        chosen = run / CHECKPOINTS / which
    if chosen not in found:
        names = ", ".join(p.name for p in found)
        raise RunLoadError(f"{run}: no checkpoint {which!r}; choose best, last or one of {names}")
    return chosen


def _best_name(last: Path) -> str:
    """The best checkpoint's name, as the last checkpoint recorded it: in its manifest, or
    (runs saved before the manifest held it) in its loop state, read whole."""
    manifest = read_manifest(last)
    if BEST in manifest:
        return manifest[BEST]
    try:
        state = read_state(last)
    except DamagedCheckpoint:  # a checksum mismatch, if any, says more
        verify_checkpoint(last)
        raise
    return state.get("loop", {}).get("best_checkpoint", "")


def usable_device(device: str | torch.device) -> torch.device:
    """`auto` (a GPU when there is one), `cpu`, `cuda` or `cuda:N`, checked."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(device)
    except RuntimeError:
        raise RunLoadError(f"unknown device {str(device)!r}; use auto, cpu, cuda or "
                           "cuda:N") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RunLoadError("--device cuda was asked for, but this machine has no usable GPU")
    return device


def read_config(run: Path) -> RunConfig:
    """A run's config.json, after checking that `run` is a run."""
    if not run.is_dir():
        raise RunLoadError(f"{run}: no such run directory")
    path = run / CONFIG
    if not path.is_file():
        raise RunLoadError(f"{run}: not an lmlab run (no {CONFIG})")
    try:
        return read_run_config(path)
    except RunConfigError as error:
        raise RunLoadError(f"{path}: {error}") from None


def check_tokenizer(run: Path, config: RunConfig) -> None:
    """`run`'s tokenizer.json must be the one it was trained with, as config.json's SHA-256
    records it; runs saved before it was recorded are taken as they are."""
    recorded = config.tokenizer_sha256
    path = run / TOKENIZER
    if recorded is None:
        return
    if not path.is_file():
        raise RunLoadError(f"{path} is missing, but this run was trained with one ({CONFIG} "
                           f"records its SHA-256); put the run's own {TOKENIZER} back")
    if sha256_of(path) != recorded:
        raise RunLoadError(f"{path} is not the tokenizer this run was trained with (its SHA-256 "
                           f"differs from the one recorded in {CONFIG}); put the run's own "
                           f"{TOKENIZER} back")


def build_heads(config: RunConfig, objective: Objective) -> dict[str, Head]:
    """The heads a run was trained with: those its config names with their settings (a
    fine-tuned run's task head; none for an imported bare encoder), else the objective's."""
    named = config.named_heads
    if named is None:
        named = objective.head_options()
    return {name: make_head(name, config.model, **options) for name, options in named.items()}


def load_run(run: str | Path, checkpoint: str = "best", device: str | torch.device = "cpu",
             special: SpecialTokens | None = None) -> Run:
    """Load a run directory written by `lmlab pretrain` or `lmlab finetune`.

    `checkpoint` is "best", "last" or a checkpoint name such as "step-00001000". `special`
    gives the special tokens of a run trained on token ids without a tokenizer.json (by
    default lmlab's layout with no sentinels). A backbone trained with DeBERTa-v3's embedding
    sharing reads one merged table (lmlab.model.sharing.merge_sharing), as every use of it
    after pre-training takes it.
    """
    run = Path(run)
    config = read_config(run)
    model_cfg = config.model
    device = usable_device(device)
    chosen = pick_checkpoint(run, checkpoint)
    check_tokenizer(run, config)
    tokenizer = None
    if (run / TOKENIZER).is_file():
        try:
            tokenizer = load_tokenizer(run / TOKENIZER, names=config.special_token_names)
        except DataError as error:
            raise RunLoadError(str(error)) from None
        special = special_tokens_of(tokenizer, str(run / TOKENIZER),
                                    config.special_token_names)
    elif special is None:
        special = SpecialTokens.layout(model_cfg.vocab_size, 0)
    spec = config.objective
    try:
        options = config.objective_options()
        word_starts = word_start_table(tokenizer) if tokenizer and options.whole_word else None
        objective = build_objective(spec, special, options, word_starts)
        heads = build_heads(config, objective)
    except (ValueError, TypeError) as error:
        raise RunLoadError(f"{run / CONFIG}: {error}") from None
    model = LanguageModel(model_cfg, heads=heads)  # as training built it
    try:
        load_weights(chosen, model)
    except CheckpointError as error:
        damaged = error if isinstance(error, DamagedCheckpoint) else None
        raise RunLoadError(str(error), damaged) from None
    merge_sharing(model)  # a GDES backbone as everything after pre-training reads it
    model.to(device).eval()
    return Run(model, tokenizer, special, objective, spec, run, chosen, config)
