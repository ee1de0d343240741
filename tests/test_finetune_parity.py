"""Fine-tuned BERT against Hugging Face's task models, both directions, through the converter.

The task heads (classify, tag, answer) must give BertForSequenceClassification's,
BertForTokenClassification's and BertForQuestionAnswering's logits, and each task's loss
(ClassifyTask, RegressTask, NERTask, QATask) must be HF's loss from the same labels: a run
fine-tuned here exports as the HF model users load, and a HF task checkpoint scores the same
here. Tiny config, jittered random weights, no downloads; batches come from the tasks' own
`batch`, so padding, token types and label positions are what fine-tuning trains on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import pytest
import torch

from lmlab.export import from_hf_state_dict, hf_config, to_hf_state_dict
from lmlab.finetune.base import Row, Task
from lmlab.finetune.registry import make_task
from lmlab.kernels.linear_cross_entropy import IGNORE_INDEX
from lmlab.model import LanguageModel
from lmlab.model.heads import make_head
from lmlab.objectives import Batch, SpecialTokens
from lmlab.runs.schema import Reading
from lmlab.tasks.finetune_config import FinetuneConfig
from lmlab.tasks.framing import Words, first_pieces
from tests.test_hf_parity import VOCAB, jitter, tiny_config, transformers

CFG = tiny_config("bert")
SPECIAL = SpecialTokens.layout(VOCAB)
FINETUNE = FinetuneConfig(train="train.tsv", validation="validation.tsv")
READING = Reading("bidirectional", "cls")  # BERT's [CLS] pooling, at position 0
TOLERANCE = dict(atol=1e-5, rtol=0.0)
TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]


def task(name: str, labels: list[str] | None = None) -> Task:
    return make_task(replace(FINETUNE, task=name), labels)


def text(length: int, generator: torch.Generator) -> list[int]:
    """Ordinary tokens (no special ids)."""
    first = max(SPECIAL.all_ids) + 1
    return torch.randint(first, VOCAB, (length,), generator=generator).tolist()


def pair(first: int, second: int, generator: torch.Generator) -> tuple[list[int], list[int]]:
    """`[CLS] A [SEP] B [SEP]` and its token types, 0 for A and 1 for B."""
    ids = [SPECIAL.cls, *text(first, generator), SPECIAL.sep, *text(second, generator),
           SPECIAL.sep]
    return ids, [0] * (first + 2) + [1] * (second + 1)


def pair_rows(targets: list) -> list[Row]:
    """Pairs of different lengths (16, 11 and 7 tokens), so two rows are padded."""
    generator = torch.Generator().manual_seed(0)
    sizes = [(6, 7), (4, 4), (2, 2)]
    return [Row(*pair(first, second, generator), index, target)
            for index, ((first, second), target) in enumerate(zip(sizes, targets, strict=True))]


def ner_rows() -> list[Row]:
    """Sentences of words split into 1–3 pieces, between [CLS] and [SEP]; a tag on each word's
    first piece only, IGNORE_INDEX on the other pieces and the specials."""
    generator = torch.Generator().manual_seed(1)
    rows = []
    for index, pieces in enumerate([(1, 2, 1, 3, 1), (2, 1, 1), (1, 1, 3, 1, 2, 1, 1, 1)]):
        word_ids = [None, *(word for word, count in enumerate(pieces) for _ in range(count)),
                    None]
        ids = [SPECIAL.cls, *text(len(word_ids) - 2, generator), SPECIAL.sep]
        tags = torch.randint(0, len(TAGS), (len(pieces),), generator=generator).tolist()
        targets = [IGNORE_INDEX] * len(ids)
        for word, position in enumerate(first_pieces(word_ids)):
            targets[position] = tags[word]
        words = Words.joined([f"w{word}" for word in range(len(pieces))])
        rows.append(Row(ids, [0] * len(ids), index, targets,
                        {"word_ids": word_ids, "words": words}))
    return rows


def qa_rows() -> list[Row]:
    """Question and context windows of one length (QATask rules out padding positions, which
    HF scores), answers inside the context and one unanswerable (at [CLS], as in SQuAD v2)."""
    generator = torch.Generator().manual_seed(2)
    spans = [(8, 10), (12, 12), (0, 0)]
    return [Row(*pair(5, 9, generator), index, span) for index, span in enumerate(spans)]


@dataclass(frozen=True)
class Case:
    hf_class: str
    task: Task
    rows: Callable[[], list[Row]]
    hf_settings: dict  # what the HF config adds to the architecture


CASES = {
    "classify": Case("BertForSequenceClassification", task("classify", ["a", "b", "c"]),
                     lambda: pair_rows([2, 0, 1]), dict(num_labels=3)),
    "regress": Case("BertForSequenceClassification", task("regress"),
                    lambda: pair_rows([0.5, -1.25, 3.0]),
                    dict(num_labels=1, problem_type="regression")),
    "ner": Case("BertForTokenClassification", task("ner", TAGS), ner_rows,
                dict(num_labels=len(TAGS))),
    "qa": Case("BertForQuestionAnswering", task("qa"), qa_rows, {}),
}


def task_heads(case: Case) -> dict:
    return {case.task.head: make_head(case.task.head, CFG, **case.task.head_options())}


def random_lmlab(case: Case) -> LanguageModel:
    torch.manual_seed(0)
    return jitter(LanguageModel(CFG, task_heads(case)), seed=1)


def hf_model(case: Case) -> torch.nn.Module:
    torch.manual_seed(0)
    hf_class = getattr(transformers, case.hf_class)
    return hf_class(hf_config(CFG, "bert", **case.hf_settings)).eval()


def head_logits(logits: torch.Tensor, case: Case, batch: Batch) -> torch.Tensor:
    """lmlab's head output of a batch, read off HF's logits over all positions."""
    if case.task.head == "tag":  # lmlab scores only the labelled positions
        return batch.predict_at["tag"].read(logits)
    return logits


@torch.no_grad()
def lmlab_outputs(model: LanguageModel, case: Case) -> dict[str, torch.Tensor]:
    """The task head's logits and the task's loss (Σ sum / count over its terms)."""
    batch = case.task.batch(case.rows(), READING, token_types=True)
    outputs = model(**batch.model_inputs())
    return {"logits": outputs[case.task.head], "loss": case.task.loss(outputs, batch).mean()}


@torch.no_grad()
def hf_outputs(model: torch.nn.Module, case: Case) -> dict[str, torch.Tensor]:
    """The same from HF on the same batch, padding given as its attention mask, and its own
    loss from the task's labels."""
    batch = case.task.batch(case.rows(), READING, token_types=True)
    inputs = dict(input_ids=batch.input_ids, token_type_ids=batch.token_type_ids,
                  attention_mask=(batch.mask.segment_ids > 0).long())
    if case.task.head == "answer":
        outputs = model(**inputs, start_positions=batch.extras["start"],
                        end_positions=batch.extras["end"])
        logits = torch.stack((outputs.start_logits, outputs.end_logits), dim=-1)
    else:
        labels = batch.targets if case.task.head == "tag" else batch.extras["label"]
        outputs = model(**inputs, labels=labels)
        logits = outputs.logits
    return {"logits": head_logits(logits, case, batch), "loss": outputs.loss}


def assert_same_outputs(ours: dict[str, torch.Tensor], theirs: dict[str, torch.Tensor]) -> None:
    for name in ("logits", "loss"):
        torch.testing.assert_close(ours[name], theirs[name], **TOLERANCE, msg=name)


@pytest.mark.parametrize("name", CASES)
def test_export_matches_hf_task_model(name):
    case = CASES[name]
    ours = random_lmlab(case)
    theirs = hf_model(case)
    theirs.load_state_dict(to_hf_state_dict(ours, "bert"), strict=True)
    assert_same_outputs(lmlab_outputs(ours, case), hf_outputs(theirs, case))


@pytest.mark.parametrize("name", CASES)
def test_import_matches_hf_task_model(name):
    case = CASES[name]
    theirs = jitter(hf_model(case), seed=2)
    ours = from_hf_state_dict(theirs.state_dict(), CFG, "bert", heads=task_heads(case)).eval()
    assert list(ours.heads) == [case.task.head]
    assert_same_outputs(lmlab_outputs(ours, case), hf_outputs(theirs, case))


@pytest.mark.parametrize("name", CASES)
def test_round_trip_through_hf_task_model_is_exact(name):
    case = CASES[name]
    ours = random_lmlab(case)
    theirs = hf_model(case)
    theirs.load_state_dict(to_hf_state_dict(ours, "bert"), strict=True)
    back = from_hf_state_dict(theirs.state_dict(), CFG, "bert", heads=task_heads(case)).eval()
    expected, got = ours.state_dict(), back.state_dict()
    assert expected.keys() == got.keys()
    for key in expected:
        assert torch.equal(expected[key], got[key]), key
    assert torch.equal(lmlab_outputs(ours, case)["logits"], lmlab_outputs(back, case)["logits"])


def test_hf_config_takes_task_settings():
    config = hf_config(CFG, "bert", num_labels=1, problem_type="regression")
    assert (config.num_labels, config.problem_type) == (1, "regression")
    assert config.hidden_size == CFG.d_model
    assert hf_config(CFG, "bert").num_labels == 2  # HF's default, as before
