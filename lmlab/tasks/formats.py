"""A task's examples as its traits say they come: from a table (classify, pairs, regress),
SQuAD JSON (qa) or CoNLL columns (ner), or from texts typed one a line. Each format reads its
files (readers.py parses them), tells them from plain text, and gives the label names of the
training examples, against which evaluation examples are checked."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from lmlab.data.errors import DataError
from lmlab.tasks.framing import Words
from lmlab.tasks.labels import check_labels_known, check_tags_known, class_names, label_names
from lmlab.tasks.readers import (
    QAExample,
    TaggedSentence,
    TextExample,
    guess_pair_column,
    is_conll,
    is_squad,
    is_table,
    read_conll,
    read_squad,
    read_table,
)
from lmlab.tasks.traits import TASKS, TaskTraits

# Two texts typed as one: a pair's two sentences, or a question and its context.
TEXT_SEPARATOR = " ||| "


class ExampleSettings(Protocol):
    """What reading a task's examples takes from its config (a FinetuneConfig holds it)."""

    task: str
    train: str | None
    train_where: str | None
    text_column: str | None
    pair_column: str | None
    label_column: str | None
    strict: bool


class ExampleFiles:
    """One format of examples, read for the task `cfg` names."""

    def __init__(self, cfg: ExampleSettings, traits: TaskTraits) -> None:
        self.cfg, self.traits = cfg, traits

    def holds(self, path: str | Path) -> bool:
        """Whether `path` holds examples in this format, rather than plain text, one text a
        line."""
        raise NotImplementedError

    def read(self, path: str | Path, where: dict[str, str] | None = None,
             need_targets: bool = True) -> list:
        raise NotImplementedError

    def from_texts(self, texts: Sequence[str]) -> list:
        """Examples from texts typed one a line (a second text after TEXT_SEPARATOR)."""
        raise NotImplementedError

    def label_names(self, examples: Sequence) -> list[str] | None:
        """The label names of the training examples (None for tasks without labels)."""
        return None

    def check_known(self, examples: Sequence, labels: Sequence[str] | None,
                    path: str | Path) -> None:
        """Refuse evaluation examples whose label training never saw."""


class TableFiles(ExampleFiles):
    def holds(self, path) -> bool:
        return is_table(path)

    def read(self, path, where=None, need_targets=True) -> list[TextExample]:
        cfg = self.cfg
        return read_table(path, cfg.text_column, self._pair_column(path), cfg.label_column,
                          numeric_label=self.traits.target == "number", where=where,
                          need_label=need_targets)

    def _pair_column(self, path: str | Path) -> str | None:
        column = self.cfg.pair_column
        if self.traits.second_text == "required":
            column = column or guess_pair_column(path)
            if column is None:
                raise DataError(f"the {self.cfg.task} task needs a second text: name its "
                                "column with --pair-column", path, 1)
        return column

    def from_texts(self, texts) -> list[TextExample]:
        examples = []
        for text in texts:
            first, _, second = text.partition(TEXT_SEPARATOR)
            examples.append(TextExample(first, second or None, None, 0))
        return examples

    def label_names(self, examples) -> list[str] | None:
        if self.traits.target != "label":
            return None
        return class_names(examples, self.cfg.train, self.cfg.train_where)

    def check_known(self, examples, labels, path) -> None:
        if labels is not None:
            check_labels_known(examples, labels, path)


class SquadFiles(ExampleFiles):
    def holds(self, path) -> bool:
        return is_squad(path)

    def read(self, path, where=None, need_targets=True) -> list[QAExample]:
        read = read_squad(path, strict=self.cfg.strict, need_answers=need_targets)
        if read.skipped:
            print(f"{path}: skipped {read.skipped} questions whose answer is not at its "
                  "answer_start (--strict fails on them instead)", file=sys.stderr)
        return read.examples

    def from_texts(self, texts) -> list[QAExample]:
        examples = []
        for index, text in enumerate(texts):
            question, _, context = text.partition(TEXT_SEPARATOR)
            if not context:
                raise DataError(f"text {index + 1} needs a question and its context "
                                f"separated by {TEXT_SEPARATOR.strip()!r}")
            examples.append(QAExample(str(index), question, context, ()))
        return examples


class ConllFiles(ExampleFiles):
    def holds(self, path) -> bool:
        return is_conll(path)

    def read(self, path, where=None, need_targets=True) -> list[TaggedSentence] | list[Words]:
        sentences = read_conll(path)
        # Without targets, only the words: tags training never saw must not matter.
        return sentences if need_targets else [Words.joined(s.words) for s in sentences]

    def from_texts(self, texts) -> list[Words]:
        return [Words.of_text(text) for text in texts]

    def label_names(self, examples) -> list[str]:
        return label_names(tag for sentence in examples for tag in sentence.tags)

    def check_known(self, examples, labels, path) -> None:
        check_tags_known(examples, labels, path)


FORMATS: dict[str, type[ExampleFiles]] = {"table": TableFiles, "squad": SquadFiles,
                                          "conll": ConllFiles}


def example_files(cfg: ExampleSettings) -> ExampleFiles:
    """How the examples of `cfg`'s task are read."""
    traits = TASKS[cfg.task]
    return FORMATS[traits.examples](cfg, traits)
