"""The fine-tuning tasks by name, each with what it declares about itself, so that nothing
outside a task's own module switches on its name: the head it trains, the metric its best
checkpoint is best at, the files its examples come in, what an example is labelled with,
whether it reads a second text, and the Hugging Face class it exports to.

This is the one list of tasks: `lmlab finetune --task` offers its names, `lmlab compare`
probes them, and lmlab.finetune.registry gives each its implementation. It imports nothing
heavy, so that the command line is built without loading torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

# The files a task's examples come in (lmlab.tasks.formats): a table of texts and labels
# (.tsv, .csv, .jsonl), SQuAD JSON, or CoNLL columns of words and tags.
ExampleFormat = Literal["table", "squad", "conll"]
# What an example is labelled with: one of N label names, a number, an answer span of its
# context, or a tag per word.
TargetKind = Literal["label", "number", "answer", "tags"]
# Whether an example holds a second text (a pair's second sentence, a question's context),
# typed after the first as 'A ||| B' when texts are given one a line.
SecondText = Literal["never", "optional", "required"]


@dataclass(frozen=True)
class TaskTraits:
    summary: str  # what it learns, as --help says it
    head: str  # the model head it trains (lmlab.model.heads.HEADS)
    main_metric: str  # the checkpoint kept is the one best at this metric
    examples: ExampleFormat
    target: TargetKind
    second_text: SecondText = "never"
    # lmlab family → the Hugging Face class a run fine-tuned for it exports to
    hf_classes: Mapping[str, str] = field(default_factory=dict)
    hf_problem_type: str | None = None  # what HF's config.json says its loss is, if anything
    # whether the bag-of-words floor (lmlab.tasks.bow_floor) applies: one label per text
    bag_of_words_floor: bool = False


def every_class(kind: str) -> dict[str, str]:
    """The BERT, ModernBERT, GPT-2 and Llama classes of one kind, e.g. "TokenClassification"."""
    return {"bert": f"BertFor{kind}", "modernbert": f"ModernBertFor{kind}",
            "gpt2": f"GPT2For{kind}", "modern": f"LlamaFor{kind}"}


TASKS: dict[str, TaskTraits] = {
    "classify": TaskTraits(
        "text → label", "classify", "accuracy", "table", "label", "optional",
        every_class("SequenceClassification"), "single_label_classification",
        bag_of_words_floor=True),
    "pairs": TaskTraits(
        "two texts → label", "classify", "accuracy", "table", "label", "required",
        every_class("SequenceClassification"), "single_label_classification",
        bag_of_words_floor=True),
    "regress": TaskTraits(
        "text(s) → number", "classify", "pearson", "table", "number", "optional",
        every_class("SequenceClassification"), "regression"),
    "qa": TaskTraits(
        "SQuAD JSON → answer span", "answer", "f1", "squad", "answer", "required",
        every_class("QuestionAnswering")),
    "ner": TaskTraits(
        "CoNLL → tags", "tag", "f1", "conll", "tags", "never",
        every_class("TokenClassification")),
}


def task_help() -> str:
    """Each task with what it learns, for --task's help."""
    return ", ".join(f"{name} ({traits.summary})" for name, traits in TASKS.items())


def check_floor_applies(task: str, baseline: str) -> None:
    """Refuse, in one line and before any work, a bag-of-words floor the task cannot have."""
    if not TASKS[task].bag_of_words_floor:
        tasks = " and ".join(name for name, traits in TASKS.items() if traits.bag_of_words_floor)
        raise ValueError(f"--baseline {baseline} fits one label per text, for the {tasks} "
                         f"tasks; {task} has no bag-of-words floor (leave out --baseline)")
