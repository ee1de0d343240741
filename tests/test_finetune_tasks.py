"""The fine-tuning tasks are one registry, lmlab/tasks/traits.py: the command line's --task
choices, compare's probe tasks, the task classes and the example formats are the same set of
names, and each task's traits name things that exist (a head, a format, its main metric)."""

import argparse

import numpy as np
import pytest

from lmlab.cli import build_parser
from lmlab.finetune.ner_task import Tagged
from lmlab.finetune.qa_spans import Answer
from lmlab.finetune.registry import TASK_CLASSES, make_task
from lmlab.finetune.sequence_tasks import LabelPrediction
from lmlab.model.heads import HEADS
from lmlab.tasks.finetune_config import FinetuneConfig
from lmlab.tasks.formats import FORMATS, TableFiles, example_files
from lmlab.tasks.framing import Words
from lmlab.tasks.named import NamedTask
from lmlab.tasks.readers import QAExample, TaggedSentence, TextExample
from lmlab.tasks.traits import TASKS


def subcommand(name: str) -> argparse.ArgumentParser:
    (commands,) = [a for a in build_parser()._actions
                   if isinstance(a, argparse._SubParsersAction)]
    return commands.choices[name]


def test_the_command_line_offers_the_registry_s_tasks():
    (task,) = [a for a in subcommand("finetune")._actions if a.dest == "task"]
    assert list(task.choices) == list(TASKS)
    for name, traits in TASKS.items():
        assert f"{name} ({traits.summary})" in task.help


def test_compare_probes_the_registry_s_tasks(tmp_path):
    (probe,) = [a for a in subcommand("compare")._actions if a.dest == "probes"]
    assert f"(task: {', '.join(TASKS)})" in probe.help
    for split in ("train.tsv", "dev.tsv"):
        (tmp_path / split).write_text("label\tsentence\n")
    files = f"{tmp_path / 'train.tsv'}:{tmp_path / 'dev.tsv'}"
    for name in TASKS:
        assert NamedTask.read(f"p={name}:{files}").task == name
    with pytest.raises(ValueError, match=f"unknown task 'tag'; choose from {', '.join(TASKS)}$"):
        NamedTask.read(f"p=tag:{files}")


def test_every_task_has_a_class_a_head_and_a_format():
    assert set(TASK_CLASSES) == set(TASKS)
    for name, traits in TASKS.items():
        cfg = FinetuneConfig(task=name, train="train", validation="validation")
        task = make_task(cfg, ["a", "b"] if traits.target in ("label", "tags") else None)
        assert (task.name, task.traits, task.head) == (name, traits, traits.head)
        assert traits.head in HEADS and traits.examples in FORMATS
        assert isinstance(example_files(cfg), FORMATS[traits.examples])


def right_predictions(name: str):
    """A task with two examples of its kind, and the predictions that are right for them."""
    cfg = FinetuneConfig(task=name, train="train", validation="validation")
    kind = TASKS[name].target
    if kind == "label":
        examples = [TextExample("a", "b", label, 1) for label in ("x", "y")]
        predictions = [LabelPrediction(i, np.eye(2)[i]) for i in range(2)]
    elif kind == "number":
        examples, predictions = [TextExample("a", None, v, 1) for v in (1.0, 2.0)], [1.0, 2.0]
    elif kind == "answer":
        examples = [QAExample(str(i), "q", "an answer", (("answer", 3),)) for i in range(2)]
        predictions = [Answer("answer", 1.0, 3, 9)] * 2
    else:
        tags = ("B-PER", "O")
        examples = [TaggedSentence(("Anna", "runs"), tags, 1)] * 2
        predictions = [Tagged(Words.joined(("Anna", "runs")), tags, (1.0, 1.0))] * 2
    labels = ["x", "y"] if kind == "label" else ["B-PER", "O"] if kind == "tags" else None
    return make_task(cfg, labels), examples, predictions


def test_a_task_s_main_metric_is_one_it_computes():
    for name, traits in TASKS.items():
        task, examples, predictions = right_predictions(name)
        scored = task.metrics(examples, predictions)[traits.main_metric]
        assert round(scored, 6) in (1.0, 100.0), (name, scored)  # a fraction or a percentage


def test_typed_texts_give_a_second_text_only_where_a_task_reads_one():
    cfg = FinetuneConfig(task="pairs", train="train", validation="validation")
    files = example_files(cfg)
    assert isinstance(files, TableFiles)
    (example,) = files.from_texts(["a cat ||| a dog"])
    assert (example.text, example.text_pair) == ("a cat", "a dog")
    (words,) = example_files(FinetuneConfig(task="ner", train="t", validation="v")).from_texts(
        ["a cat ||| a dog"])
    assert "|" in words.words  # one text: NER reads no second one
