"""A fine-tuning task by name, as `lmlab compare --probe` (and `lmlab plan`, pricing its
probes) and `lmlab finetune --suite` take one: NAME=TASK:TRAIN:VALIDATION[:TEST], or
NAME=FILE.yaml (a `lmlab finetune --config` file) for a task whose columns or splits must be
named."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from lmlab.config.parsing import resolve_config
from lmlab.tasks.finetune_config import FinetuneConfig
from lmlab.tasks.traits import TASKS

CONFIG_SUFFIXES = (".yaml", ".yml", ".toml")
SYNTAX = "NAME=TASK:TRAIN:VALIDATION[:TEST] or NAME=CONFIG.yaml"
EXAMPLE = "sst2=classify:train.tsv:dev.tsv"


@dataclass(frozen=True)
class NamedTask:
    """A task's files, or the fine-tuning config file (YAML/TOML) they came from, which also
    names columns and splits."""

    name: str
    task: str
    train: str
    validation: str
    test: str | None = None  # None: the validation file is scored (and selects checkpoints)
    config: str | None = None  # the finetune config file the fields above came from

    @classmethod
    def read(cls, text: str, what: str = "probe") -> NamedTask:
        """NAME=TASK:TRAIN:VALIDATION[:TEST], e.g. sst2=classify:train.tsv:dev.tsv, or
        NAME=FILE.yaml / FILE.toml, a fine-tuning config; `what` names the option in errors."""
        name, _, rest = text.partition("=")
        malformed = ValueError(f"{what} {text!r}: write {SYNTAX}, e.g. {EXAMPLE}")
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
            raise malformed
        if Path(rest).suffix in CONFIG_SUFFIXES:
            return cls._from_config(name, rest, what)
        parts = rest.split(":")
        if not 3 <= len(parts) <= 4:
            raise malformed
        if parts[0] not in TASKS:
            raise ValueError(f"{what} {name}: unknown task {parts[0]!r}; choose from "
                             f"{', '.join(TASKS)}")
        named = cls(name, *parts)
        named._check_files(what)
        return named

    @classmethod
    def _from_config(cls, name: str, path: str, what: str) -> NamedTask:
        if not Path(path).is_file():
            raise ValueError(f"{what} {name}: {path} is not a file")
        try:
            cfg = resolve_config(Path(path), {}, FinetuneConfig)
        except ValueError as error:
            raise ValueError(f"{what} {name}: {path}: {error}") from None
        named = cls(name, cfg.task, cfg.train, cfg.validation, cfg.test, path)
        named._check_files(what)
        return named

    def _check_files(self, what: str) -> None:
        for path in (self.train, self.validation, self.test):
            if path is not None and not Path(path).is_file():
                raise ValueError(f"{what} {self.name}: {path} is not a file")

    @property
    def scored_split(self) -> str:
        return "test" if self.test else "validation"

    def finetune_config(self, **fields):
        """The task's fine-tuning config: its config file's fields, then `fields` (settings
        shared with other tasks), then its own files."""
        own = {"task": self.task, "train": self.train, "validation": self.validation,
               "test": self.test}
        return resolve_config(Path(self.config) if self.config else None, {**fields, **own},
                              FinetuneConfig)
