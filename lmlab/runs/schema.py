"""config.json, a run directory's record of how its run was made. Every key of it is named
here and nowhere else, typed, so that its writers (pretrain, finetune, import, --resume) and
its readers (load_run, predict, export, serve, embed) agree on one shape. Keys added since the
first runs are optional: run directories written before them still load.

    train             the training settings, by the field names of the config class that
                      wrote them (TrainConfig, FinetuneConfig; an imported run: its objective)
    model             the ModelConfig
    pretraining       a fine-tuned run's: the training settings of the run it came from (its
                      objective says how the backbone learnt to read)
    dataset           a pre-trained run's dataset, relative to the run (absent: in memory)
    source            a fine-tuned run's: {run, checkpoint} it was fine-tuned from
    init              a continued pre-training's (--init): {run, checkpoint, weights_sha256}
                      of the run whose weights it started from, its path relative to the run
    task              a fine-tuned run's: {name, labels}; its reading is kept among the
                      training settings (attention, pooling), its head among the heads
    heads             head name → its options (absent: the objective's heads, no options);
                      names earlier versions wrote are read as today's (lmlab.runs.old_names)
    special_tokens    role → token of an imported tokenizer (absent: lmlab's names)
    tokenizer_sha256  of the run's tokenizer.json (absent: runs saved before it was recorded)
    imported          an imported run's: {from, architectures, family}
    embedding         how an imported sentence-transformers model embeds: {pooling,
                      normalize, max_len}
    resumes           one entry per --resume that changed a setting: {from_checkpoint,
                      changed: {field: {from, to}}}
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

from lmlab.atomic import write_text_atomic
from lmlab.config import ModelConfig
from lmlab.config.objective_options import ObjectiveOptions
from lmlab.data.tokenizer import LMLAB_SPECIAL_NAMES
from lmlab.runs.old_names import current_heads

Settings = TypeVar("Settings")


class RunConfigError(ValueError):
    """A config.json that does not describe a run, stated in one line."""


@dataclass(frozen=True)
class Reading:
    """How a fine-tuned model reads a row: its attention, and which position(s) a sequence head
    pools."""

    attention: str  # "bidirectional" or "causal"
    pooling: str  # "cls", "mean" or "last"


@dataclass(frozen=True)
class RunTask:
    """What a run was fine-tuned for: the task (a name of lmlab.finetune's registry), its label
    or tag names by output index (None: it predicts numbers or spans), how the model reads a
    row, and the head trained with its options."""

    name: str
    labels: tuple[str, ...] | None
    reading: Reading
    head: str
    head_options: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, task: Mapping, train: Mapping, heads: Mapping) -> RunTask:
        ((head, options),) = heads.items()  # a fine-tuned model has its task's head alone
        labels = task["labels"]
        return cls(task["name"], None if labels is None else tuple(labels),
                   Reading(train["attention"], train["pooling"]), head, dict(options))


@dataclass(frozen=True)
class Source:
    """The pre-trained run a fine-tuned run came from, and its checkpoint."""

    run: str  # relative to the fine-tuned run (before that was recorded: as given)
    checkpoint: str


@dataclass(frozen=True)
class InitRecord:
    """The run a continued pre-training started from (`lmlab pretrain --init`): its path
    relative to this run, the checkpoint, and the SHA-256 of that checkpoint's weights file."""

    run: str
    checkpoint: str
    weights_sha256: str

    def to_json(self) -> dict:
        return {"run": self.run, "checkpoint": self.checkpoint,
                "weights_sha256": self.weights_sha256}


@dataclass(frozen=True)
class ImportRecord:
    """Where an imported run came from: its path relative to the run, the Hugging Face
    architectures its config.json named, and the lmlab family it was read as."""

    source: str
    architectures: tuple[str, ...] | None
    family: str

    @classmethod
    def from_json(cls, record: Mapping) -> ImportRecord:
        architectures = record.get("architectures")
        return cls(record["from"], None if architectures is None else tuple(architectures),
                   record["family"])

    def to_json(self) -> dict:
        return {"from": self.source, "family": self.family,
                "architectures": None if self.architectures is None else
                list(self.architectures)}


@dataclass(frozen=True)
class Embedding:
    """How an imported sentence-transformers model embeds (lmlab.export.st_pooling); None: not
    recorded, lmlab's default."""

    pooling: str | None = None
    normalize: bool | None = None
    max_len: int | None = None  # longer texts are cut to it

    def to_json(self) -> dict:
        return {spec.name: getattr(self, spec.name) for spec in fields(self)
                if getattr(self, spec.name) is not None}


@dataclass(frozen=True)
class Resume:
    """A --resume that changed settings: from which checkpoint on, and each field's (old, new)
    value."""

    from_checkpoint: str | None
    changed: Mapping[str, tuple[Any, Any]]

    @classmethod
    def from_json(cls, record: Mapping) -> Resume:
        return cls(record["from_checkpoint"],
                   {name: (change["from"], change["to"])
                    for name, change in record["changed"].items()})

    def to_json(self) -> dict:
        return {"from_checkpoint": self.from_checkpoint,
                "changed": {name: {"from": old, "to": new}
                            for name, (old, new) in self.changed.items()}}


@dataclass(frozen=True)
class RunConfig:
    """A run's config.json, typed; see the module's docstring for each entry."""

    model: ModelConfig
    train: Mapping[str, Any]
    pretraining: Mapping[str, Any] | None = None
    dataset: str | None = None
    source: Source | None = None
    init: InitRecord | None = None
    task: RunTask | None = None
    heads: Mapping[str, Mapping[str, Any]] | None = None  # of a run with no task
    special_tokens: Mapping[str, str | None] | None = None
    tokenizer_sha256: str | None = None
    imported: ImportRecord | None = None
    embedding: Embedding | None = None
    resumes: tuple[Resume, ...] = ()

    @property
    def pretraining_settings(self) -> Mapping[str, Any]:
        """The settings the backbone learnt to read with: the run's own, or for a fine-tuned
        run those of the run it was fine-tuned from."""
        return self.train if self.pretraining is None else self.pretraining

    @property
    def objective(self) -> str:
        """The objective spec the backbone was pre-trained with, as the user wrote it."""
        return self.pretraining_settings["objective"]

    def objective_options(self) -> ObjectiveOptions:
        settings = self.pretraining_settings
        if "objective_options" in settings:
            return ObjectiveOptions(**settings["objective_options"])
        # Runs saved before the options were grouped hold them among the training fields.
        names = {spec.name for spec in fields(ObjectiveOptions)}
        return ObjectiveOptions(**{k: v for k, v in settings.items() if k in names})

    @property
    def special_token_names(self) -> Mapping[str, str | None]:
        """Each special-token role → its token in the run's tokenizer (None: it has none).
        Runs of lmlab's own tokenizers use lmlab's names; imported runs save their tokenizer's."""
        return LMLAB_SPECIAL_NAMES if self.special_tokens is None else self.special_tokens

    @property
    def named_heads(self) -> Mapping[str, Mapping[str, Any]] | None:
        """The heads the run was trained with and their options; None: the objective's."""
        if self.task is not None:
            return {self.task.head: self.task.head_options}
        return self.heads

    def settings(self, kind: type[Settings]) -> Settings:
        """The training settings as `kind` (e.g. FinetuneConfig); fields since retired are
        left out, fields added since take their defaults."""
        known = {spec.name for spec in fields(kind)}
        return kind(**{name: value for name, value in self.train.items() if name in known})

    @classmethod
    def from_json(cls, data: Mapping) -> RunConfig:
        """The record of a config.json's contents; RunConfigError if it describes no run."""
        try:
            return cls._from_json(data)
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise RunConfigError(f"unreadable run configuration ({error})") from None

    @classmethod
    def _from_json(cls, data: Mapping) -> RunConfig:
        train, heads, task = dict(data["train"]), data.get("heads"), data.get("task")
        heads = None if heads is None else current_heads(heads)
        embedding, source = data.get("embedding"), data.get("source")
        config = cls(
            model=ModelConfig(**data["model"]), train=train,
            pretraining=data.get("pretraining"), dataset=data.get("dataset"),
            source=None if source is None else Source(source["run"], source["checkpoint"]),
            init=None if "init" not in data else InitRecord(**data["init"]),
            task=None if task is None else RunTask.from_json(task, train, heads),
            heads=heads if task is None else None,
            special_tokens=data.get("special_tokens"),
            tokenizer_sha256=data.get("tokenizer_sha256"),
            imported=None if "imported" not in data else ImportRecord.from_json(
                data["imported"]),
            embedding=None if embedding is None else Embedding(**embedding),
            resumes=tuple(Resume.from_json(r) for r in data.get("resumes", ())))
        if not isinstance(config.objective, str):  # a run is rebuilt from its objective
            raise TypeError(f"objective {config.objective!r} is not a spec")
        return config

    def to_json(self) -> dict:
        """config.json's contents; entries a run does not have are left out."""
        task = self.task
        found = {
            "train": dict(self.train), "model": self.model.to_dict(),
            "pretraining": self.pretraining, "dataset": self.dataset,
            "source": None if self.source is None else {"run": self.source.run,
                                                         "checkpoint": self.source.checkpoint},
            "init": None if self.init is None else self.init.to_json(),
            "task": None if task is None else {
                "name": task.name, "labels": None if task.labels is None else list(task.labels)},
            "heads": self.named_heads, "special_tokens": self.special_tokens,
            "tokenizer_sha256": self.tokenizer_sha256,
            "imported": None if self.imported is None else self.imported.to_json(),
            "embedding": None if self.embedding is None else self.embedding.to_json(),
            "resumes": [resume.to_json() for resume in self.resumes] or None}
        return {key: value for key, value in found.items() if value is not None}


def read_run_config(path: Path) -> RunConfig:
    """The run configuration saved at `path`; RunConfigError (naming no path) if it is not
    JSON or describes no run."""
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise RunConfigError(f"unreadable run configuration ({error})") from None
    return RunConfig.from_json(data)


def write_run_config(path: Path, config: RunConfig) -> None:
    write_text_atomic(path, json.dumps(config.to_json(), indent=2, sort_keys=True))
