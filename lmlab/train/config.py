"""The training run's configuration: one typed, frozen dataclass, validated at the edge.

Sources, later ones winning: defaults → a YAML or TOML file → command-line overrides. An
unknown field is named with the closest known one.
"""

from __future__ import annotations

import difflib
import json
import types
import typing
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib


@dataclass(frozen=True)
class TrainConfig:
    # what and where
    objective: str = "mlm"
    data: str | None = None  # a prepared dataset; None = the built-in corpus, prepared once
    model: str = "auto"  # a preset; auto = bert-mini for masked objectives, else gpt2-mini
    out: str | None = None  # run directory; None = runs/<objective>
    model_overrides: dict = field(default_factory=dict)  # ModelConfig fields, e.g. dropout
    # batch and budget (a budget is steps, tokens or minutes; the smallest one ends the run)
    seq_len: int = 128
    batch_size: int = 32  # sequences per optimiser step, across all ranks
    micro_batch_size: int | None = None  # per rank and forward; None = batch_size / ranks
    steps: int | None = None
    tokens: str | None = None  # a count such as "20M", or "chinchilla" (20 × parameters)
    minutes: float | None = None
    # optimisation
    lr: float = 1e-3
    schedule: Literal["cosine", "linear", "constant", "wsd"] = "cosine"
    warmup_steps: int | None = None  # None = 5% of the run, at most 1000
    lr_floor: float = 0.1  # final learning rate as a fraction of the peak
    weight_decay: float = 0.1
    beta2: float = 0.95
    grad_clip: float = 1.0
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"
    compile: bool = False
    max_nonfinite_steps: int = 5  # consecutive skipped steps before the run stops
    # objective options
    mlm_rate: float = 0.15
    mlm_rate_start: float | None = None
    mask_prob: float = 0.8
    random_prob: float = 0.1
    mlm_selection: Literal["bernoulli", "exact"] = "bernoulli"
    whole_word: bool = False
    span_noise_density: float = 0.15
    span_mean_length: float = 3.0
    packing: Literal["auto", "concatenate", "best_fit"] = "auto"
    # evaluation, checkpoints, logging
    eval_every: int = 200
    eval_batches: int = 16
    checkpoint_every: int = 500
    keep_last: int = 2
    log_every: int = 10
    seed: int = 0
    num_workers: int = 0
    distributed: Literal["ddp", "fsdp"] = "ddp"  # under torchrun; fsdp = FSDP2 fully_shard
    resume: bool = False
    overwrite: bool = False

    def __post_init__(self) -> None:
        for name, annotation in field_types().items():
            if typing.get_origin(annotation) is Literal:
                allowed = typing.get_args(annotation)
                if getattr(self, name) not in allowed:
                    raise ValueError(f"{name}={getattr(self, name)!r} is not one of "
                                     f"{', '.join(map(str, allowed))}")
        for name in ("seq_len", "batch_size", "eval_every", "checkpoint_every", "log_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.lr <= 0:
            raise ValueError(f"lr must be positive, got {self.lr}")
        if self.resume and self.overwrite:
            raise ValueError("choose --resume or --overwrite, not both")

    def to_dict(self) -> dict:
        return asdict(self)


def field_types() -> dict[str, Any]:
    """Each field's type with `X | None` reduced to X."""
    hints = typing.get_type_hints(TrainConfig)
    reduced = {}
    for name, hint in hints.items():
        if isinstance(hint, types.UnionType):
            hint = next(arg for arg in typing.get_args(hint) if arg is not type(None))
        reduced[name] = hint
    return reduced


def check_field(name: str) -> None:
    names = [f.name for f in fields(TrainConfig)]
    if name not in names:
        close = difflib.get_close_matches(name, names, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"unknown config field {name!r}{hint}")


KIND_NAMES = {int: "an integer", float: "a number", bool: "true or false", dict: "a JSON object"}


def parse_value(name: str, text: str) -> Any:
    """A command-line string → the field's type (numbers, booleans, None, dicts as JSON)."""
    check_field(name)
    kind = field_types()[name]
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


def read_config_file(path: Path) -> dict:
    if not path.is_file():
        raise ValueError(f"config file {path} does not exist")
    text = path.read_text()
    if path.suffix == ".toml":
        values = tomllib.loads(text)
    elif path.suffix in (".yaml", ".yml"):
        import yaml

        values = yaml.safe_load(text) or {}
    else:
        raise ValueError(f"config file {path} must be .toml, .yaml or .yml")
    if not isinstance(values, dict):
        raise ValueError(f"config file {path} must hold a mapping of field: value")
    for name in values:
        check_field(name)
    return values


def resolve_config(file: Path | None = None, overrides: dict | None = None) -> TrainConfig:
    values = read_config_file(file) if file is not None else {}
    for name in overrides or {}:
        check_field(name)
    values.update(overrides or {})
    return replace(TrainConfig(), **values)


