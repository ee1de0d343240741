"""A fine-tuned run used at once: texts (or a file in the task's format) → predictions shaped
as the Hugging Face pipelines shape them: a label and its score (every label's on request), an
answer with its score and character span, or entities with type, score and character span."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from lmlab.finetune.base import Task
from lmlab.finetune.outputs import row_outputs
from lmlab.finetune.registry import make_task
from lmlab.runs import Run
from lmlab.runs.run import RunLoadError, load_run
from lmlab.runs.schema import Reading
from lmlab.tasks.finetune_config import FinetuneConfig
from lmlab.tasks.formats import example_files
from lmlab.tasks.framing import Encoder, Words
from lmlab.tasks.readers import QAExample, TextExample


def fine_tuned_task(run: Run) -> tuple[Task, FinetuneConfig]:
    """The task a run was fine-tuned for, as its config saved it."""
    if run.task is None:
        raise RunLoadError(f"{run.path} is not fine-tuned (it was pre-trained with "
                           f"{run.spec}); fine-tune it first with lmlab finetune")
    cfg = run.config.settings(FinetuneConfig)
    return make_task(cfg, run.task.labels), cfg


def predict(run: Run | str | Path, texts: Sequence[str] | None = None,
            file: str | Path | None = None, all_scores: bool = False,
            batch_size: int = 64, with_inputs: bool = False) -> list[dict]:
    """One prediction per text, or per example of `file` (read as the task's training files
    are; labels, if any, are not used). `with_inputs`: each prediction also holds what it was
    made for, and the file's gold label or answers where it has them (`given`)."""
    if not isinstance(run, Run):
        run = load_run(run)
    task, cfg = fine_tuned_task(run)
    if (texts is None) == (file is None):
        raise ValueError("give texts or a file, not both and not neither")
    files = example_files(cfg)
    examples = (files.read(file, need_targets=False) if file is not None
                else files.from_texts(list(texts)))
    token_types = run.model.cfg.type_vocab_size > 0
    encoder = Encoder(run.require_tokenizer(), run.special, cfg.max_len, token_types)
    rows = task.encode(examples, encoder, training=False)
    outputs = row_outputs(run.model, task, rows, Reading(cfg.attention, cfg.pooling),
                          token_types, batch_size,
                          progress="predict" if len(rows) > 4 * batch_size else None)
    described = [task.describe(p) for p in task.predict(examples, rows, outputs)]
    if not all_scores:
        for item in described:
            item.pop("scores", None)
    if with_inputs:
        described = [{**given(example), **item}
                     for example, item in zip(examples, described, strict=True)]
    return described


def given(example: TextExample | QAExample | Words) -> dict:
    """The input of a prediction, and its gold label (or answers) when the file holds one. A
    tagging file is read for its words alone, so its tags are not given."""
    if isinstance(example, TextExample):
        found = {"text": example.text}
        if example.text_pair is not None:
            found["text_pair"] = example.text_pair
        return found if example.label is None else {**found, "gold": example.label}
    if isinstance(example, QAExample):
        found = {"question": example.question, "context": example.context}
        answers = [text for text, _ in example.answers]
        return {**found, "gold": answers} if answers else found
    return {"text": " ".join(example.words)}
