"""A fine-tuning task's labelled files read into their splits: training, validation (which
chooses the best checkpoint) and an optional test, never the validation data again."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from lmlab.atomic import sha256_of
from lmlab.tasks.finetune_config import FinetuneConfig, where_filter
from lmlab.tasks.formats import example_files


@dataclass
class Splits:
    train: list
    validation: list
    test: list | None
    labels: list[str] | None = None  # the label names training holds (None: no labels)


def read_splits(cfg: FinetuneConfig) -> Splits:
    """The task's files; label names come from training, and validation and test may hold
    no label training did not see."""
    files = example_files(cfg)
    train = files.read(cfg.train, where_filter(cfg.train_where))
    labels = files.label_names(train)
    splits = Splits(train, files.read(cfg.validation, where_filter(cfg.validation_where)),
                    None, labels)
    files.check_known(splits.validation, labels, cfg.validation)
    if cfg.test and same_data((cfg.validation, cfg.validation_where), (cfg.test, cfg.test_where)):
        # the best checkpoint is chosen on validation, so its score there is no test score
        print(f"lmlab finetune: --test {cfg.test} is the same data as --validation, which "
              "chooses the best checkpoint; it is not scored as a test", file=sys.stderr)
    elif cfg.test:
        splits.test = files.read(cfg.test, where_filter(cfg.test_where))
        files.check_known(splits.test, labels, cfg.test)
    return splits


def same_data(first: tuple[str, str | None], second: tuple[str, str | None]) -> bool:
    """Whether two (file, where filter) pairs select the same rows: the same filter, and the
    same file by path or by content."""
    (first_path, first_where), (second_path, second_where) = first, second
    if first_where != second_where:
        return False
    first_path, second_path = Path(first_path), Path(second_path)
    if first_path.resolve() == second_path.resolve():
        return True
    return (first_path.is_file() and second_path.is_file()
            and first_path.stat().st_size == second_path.stat().st_size
            and sha256_of(first_path) == sha256_of(second_path))
