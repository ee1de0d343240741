"""Training configuration: typed, frozen dataclasses, validated at the edge.

`LoopConfig` holds what every kind of training shares (optimisation, precision, evaluation,
checkpoints, logging); `TrainConfig` adds what pre-training needs. A field whose type is
itself a configuration dataclass (the objective's options) is grouped in code but flat for
users: `--mlm-rate 0.3` on the command line, `mlm_rate: 0.3` in a file.

Sources, later ones winning: defaults → a YAML or TOML file → command-line overrides. An
unknown field is named with the closest known one.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import types
import typing
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Literal

from lmlab.data.settings_file import read_settings
from lmlab.documented import check_choices, documented
from lmlab.objectives.options import ObjectiveOptions
from lmlab.train.budget import DEADLINE_VALIDATIONS, parse_count

# Steps between validations when neither the run nor its time budget decides.
EVAL_EVERY_STEPS = 200


@dataclass(frozen=True)
class LoopConfig:
    out: str | None = documented(None, "the run directory")
    batch_size: int = documented(32, "sequences per optimiser step, across all ranks")
    micro_batch_size: int | None = documented(
        None, "sequences per rank and forward pass (gradient accumulation makes up the "
        "rest); none = batch size / ranks")
    lr: float = documented(1e-3, "peak learning rate")
    schedule: Literal["cosine", "linear", "constant", "wsd"] = documented(
        "cosine", "learning-rate decay after warm-up (wsd = warmup-stable-decay)")
    warmup_steps: int | None = documented(None, "linear warm-up; none = 5% of the run, at "
                                                "most 1000 steps")
    lr_floor: float = documented(0.1, "final learning rate as a fraction of the peak")
    weight_decay: float = documented(0.1, "AdamW weight decay (not on norms, biases, "
                                           "embeddings)")
    beta2: float = documented(0.95, "AdamW's second-moment decay")
    grad_clip: float = documented(1.0, "clip the gradient's global norm to this")
    precision: Literal["fp32", "bf16", "fp16"] = documented(
        "fp32", "compute precision (bf16/fp16: autocast; weights stay fp32)")
    compile: bool = documented(False, "compile the model with torch.compile")
    activation_checkpointing: bool = documented(
        False, "recompute each block's activations in the backward pass instead of keeping "
               "them: less memory for about a third more compute")
    max_nonfinite_steps: int = documented(
        5, "stop after this many consecutive steps with a non-finite loss (each is skipped)")
    eval_every: int | None = documented(
        None, f"steps between validations; none = every {EVAL_EVERY_STEPS} steps, or "
              f"{DEADLINE_VALIDATIONS} times spread over a --minutes budget")
    checkpoint_every: int = documented(500, "steps between checkpoints (also saved at the "
                                            "end, on the best validation and when stopped)")
    keep_last: int = documented(2, "checkpoints kept besides the best one")
    log_every: int = documented(10, "steps between log lines in metrics.jsonl")
    seed: int = documented(0, "initial weights, data order and every random choice")
    distributed: Literal["ddp", "fsdp"] = documented(
        "ddp", "under torchrun: DDP, or FSDP2 (fully_shard) to shard weights and optimizer")
    patience: int | None = documented(
        None, "stop early after this many validations in a row without a new best")
    resume: bool = documented(False, "continue the run in --out exactly where it stopped")
    overwrite: bool = documented(False, "replace the run in --out")

    def __post_init__(self) -> None:
        check_choices(self)
        for name in ("batch_size", "eval_every", "checkpoint_every", "log_every", "patience"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if not math.isfinite(self.lr) or self.lr <= 0:
            raise ValueError(f"lr must be a positive number, got {self.lr}")
        if self.warmup_steps is not None and self.warmup_steps < 0:
            raise ValueError(f"warmup_steps must be 0 or more, got {self.warmup_steps}")
        if self.resume and self.overwrite:
            raise ValueError("choose --resume or --overwrite, not both")

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class TrainConfig(LoopConfig):
    objective: str = documented("mlm", "mlm, clm, prefix, span, mlm+nsp, mntp, "
                                       "mix:A=w,B=w, alternate:A,B@steps or "
                                       "then:A,B@fraction (A for that share of the steps, "
                                       "then B)")
    data: str | None = documented(None, "a prepared dataset; none = the built-in corpus, "
                                        "prepared once")
    model: str = documented("auto", "a preset (family-size, e.g. bert-small); auto = "
                                    "bert-mini for objectives that only read "
                                    "bidirectionally, else gpt2-mini")
    model_overrides: dict = documented(default_factory=dict,
                                       help='model config fields as JSON, e.g. '
                                            '\'{"dropout": 0.1}\'')
    seq_len: int = documented(128, "tokens per training row")
    num_workers: int = documented(0, "data-loading worker processes")
    steps: int | None = documented(None, "a step budget")
    tokens: str | None = documented(None, "a token budget such as 20M, or chinchilla (20 × "
                                          "parameters)")
    minutes: float | None = documented(None, "a time budget; with no budget at all, 5 "
                                             "minutes")
    eval_batches: int = documented(16, "validation micro-batches per evaluation")
    objective_options: ObjectiveOptions = dataclasses.field(default_factory=ObjectiveOptions)
    packing: Literal["auto", "concatenate", "best_fit"] = documented(
        "auto", "how documents fill rows: concatenated, or best-fit without splitting short "
        "ones; auto = what the objective needs")

    def __post_init__(self) -> None:
        super().__post_init__()
        # every budget is checked here, before a run directory is written, so that a corrected
        # command does not find a half-made run in its way
        if self.seq_len < 2:
            raise ValueError(f"seq_len must be at least 2 (a row of one token has nothing to "
                             f"predict), got {self.seq_len}")
        if self.steps is not None and self.steps < 1:
            raise ValueError(f"steps must be at least 1, got {self.steps}")
        if self.minutes is not None and not (math.isfinite(self.minutes) and self.minutes > 0):
            raise ValueError(f"minutes must be a positive number, got {self.minutes}")
        if self.tokens is not None and self.tokens != "chinchilla":
            if parse_count(self.tokens) < 1:
                raise ValueError(f"tokens must be at least 1, got {self.tokens}")


def _reduced(hint: Any) -> Any:
    """`X | None` → X."""
    if isinstance(hint, types.UnionType):
        return next(arg for arg in typing.get_args(hint) if arg is not type(None))
    return hint


def field_specs(config_class: type) -> dict[str, tuple[dataclasses.Field, Any]]:
    """Every field a user can set, by flat name → (its dataclass Field, its type with
    `X | None` reduced to X); fields of a grouped configuration appear under their own names."""
    found = {}
    hints = typing.get_type_hints(config_class)
    for spec in fields(config_class):
        kind = _reduced(hints[spec.name])
        if dataclasses.is_dataclass(kind):
            found.update(field_specs(kind))
        else:
            found[spec.name] = (spec, kind)
    return found


def flat_fields(config_class: type) -> dict[str, Any]:
    """Every field a user can set, by flat name → type."""
    return {name: kind for name, (_, kind) in field_specs(config_class).items()}


def check_field(name: str, config_class: type = TrainConfig) -> None:
    names = list(flat_fields(config_class))
    if name not in names:
        close = difflib.get_close_matches(name, names, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"unknown config field {name!r}{hint}")


KIND_NAMES = {int: "an integer", float: "a number", bool: "true or false", dict: "a JSON object"}


def parse_value(name: str, text: str, config_class: type = TrainConfig) -> Any:
    """A command-line string → the field's type (numbers, booleans, None, dicts as JSON)."""
    check_field(name, config_class)
    kind = flat_fields(config_class)[name]
    if text.lower() in ("none", "null"):
        return None
    try:
        if kind is bool:
            if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError
            return text.lower() in ("true", "1", "yes")
        if kind in (int, float):
            return kind(text)
        if kind is dict:
            return json.loads(text)
    except ValueError:
        raise ValueError(f"{name} takes {KIND_NAMES[kind]}, got {text!r}") from None
    return text


def read_config_file(path: Path, config_class: type = TrainConfig) -> dict:
    values = read_settings(path, "config file")
    for name in values:
        check_field(name, config_class)
    return values


def build_config(values: dict, config_class: type = TrainConfig):
    """A configuration from flat field values; grouped fields are gathered into their group."""
    hints = typing.get_type_hints(config_class)
    direct = {}
    for spec in fields(config_class):
        group = _reduced(hints[spec.name])
        if dataclasses.is_dataclass(group):
            mine = {k: values[k] for k in flat_fields(group) if k in values}
            direct[spec.name] = build_config(mine, group)
        elif spec.name in values:
            direct[spec.name] = values[spec.name]
    return config_class(**direct)


def resolve_config(file: Path | None = None, overrides: dict | None = None,
                   config_class: type = TrainConfig):
    values = read_config_file(file, config_class) if file is not None else {}
    for name in overrides or {}:
        check_field(name, config_class)
    values.update(overrides or {})
    return build_config(values, config_class)


def check_before_data(config: TrainConfig) -> None:
    """Catch a bad objective or preset before minutes are spent preparing data (imported here:
    parsing a config loads no torch)."""
    from lmlab.data.special_tokens import SpecialTokens
    from lmlab.objectives.registry import build_objective
    from lmlab.presets import preset

    build_objective(config.objective, SpecialTokens.layout(1024, 100), config.objective_options)
    if config.model != "auto":
        preset(config.model, vocab_size=1024)
