"""What every fine-tuning task shares: the rows it encodes, how the model reads them, and the
batch the one loop trains on.

A task encodes examples into `Row`s, turns rows into a `Batch` for its head, scores a batch as
the loop asks of any objective (`target_counts`, `loss`), and turns the model's outputs back
into predictions and metrics. What it declares about itself is its traits
(lmlab.tasks.traits); how its examples are read from files or typed texts is its format's
(lmlab.tasks.formats).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from lmlab.kernels.linear_cross_entropy import IGNORE_INDEX
from lmlab.model.masks import MaskSpec
from lmlab.objectives.base import Objective
from lmlab.objectives.batch import Batch
from lmlab.objectives.losses import LossSum
from lmlab.runs.reading import pad_right
from lmlab.runs.schema import Reading
from lmlab.tasks.finetune_config import FinetuneConfig
from lmlab.tasks.framing import Encoder
from lmlab.tasks.traits import TASKS


@dataclass
class Row:
    """One input row made from an example (a long QA context makes several)."""

    ids: list[int]
    types: list[int]
    example: int  # index of the example it was made from
    target: Any = None  # a label id, a number, or what the task keeps per row
    extra: dict = field(default_factory=dict)  # task-specific: word ids, a QA window


# A recorded sentence-transformers pooling (runs.schema.Embedding) → the fine-tuning pooling
# computing the same vector: both means run over every token read, [CLS] and [SEP] included.
RECORDED_POOLINGS = {"cls": "cls", "mean-all": "mean"}


def resolve_reading(objective: Objective, attention: str, pooling: str,
                    recorded: str | None = None) -> Reading:
    """How a model pre-trained with `objective` reads rows, its `auto` choices made: a model
    that only ever read causally keeps causal attention and pools its last token (the only
    one that has seen the whole text); others read bidirectionally. A model that records how
    it embeds (`recorded`, an imported sentence-transformers model's pooling, kept through
    --init) pools as it was trained to; otherwise [CLS] when pre-training taught it
    (next-sentence prediction), else the mean of all tokens. Prefix and span models read the
    input as their bidirectional prefix."""
    if attention == "auto":
        attention = "causal" if objective.reads_causally else "bidirectional"
    if pooling == "auto":
        if attention == "causal":
            pooling = "last"
        elif recorded in RECORDED_POOLINGS:
            pooling = RECORDED_POOLINGS[recorded]
        else:
            pooling = "cls" if objective.framing == "pair" else "mean"
    return Reading(attention, pooling)


def pooling_weights(lengths: Sequence[int], width: int, pooling: str) -> Tensor:
    """(B, width) weights of each row's positions in its pooled vector."""
    weights = torch.zeros(len(lengths), width)
    for row, length in enumerate(lengths):
        if pooling == "cls":
            weights[row, 0] = 1.0
        elif pooling == "last":
            weights[row, length - 1] = 1.0
        else:
            weights[row, :length] = 1.0 / length
    return weights


class Task:
    """Base of the tasks: `cfg.task` names the task (and its traits); `labels` are its label
    or tag names by output index, as training found them (None: a task without labels)."""

    def __init__(self, cfg: FinetuneConfig, labels: Sequence[str] | None = None,
                 train: Sequence = ()) -> None:
        """`train`: the training examples, for what a task fits to them (a classifier's label
        weights); none when it only predicts."""
        self.cfg, self.labels = cfg, labels
        self.name, self.traits = cfg.task, TASKS[cfg.task]

    @property
    def head(self) -> str:
        return self.traits.head

    @property
    def main_metric(self) -> str:
        return self.traits.main_metric

    @classmethod
    def resolved(cls, cfg: FinetuneConfig, train: Sequence) -> FinetuneConfig:
        """`cfg` with the task's own `auto`/none settings made concrete for its training
        examples, so that the saved config says how the run predicts."""
        return cfg

    # --- data -----------------------------------------------------------------------------

    def encode(self, examples: Sequence, encoder: Encoder, training: bool) -> list[Row]:
        raise NotImplementedError

    def head_options(self) -> dict:
        return {"num_labels": len(self.labels)} if self.labels else {}

    # --- batches and loss -----------------------------------------------------------------

    def batch(self, rows: Sequence[Row], reading: Reading, token_types: bool) -> Batch:
        ids, segments = pad_right([row.ids for row in rows], pad_id=0)
        types = pad_right([row.types for row in rows], pad_id=0)[0] if token_types else None
        batch = Batch(
            input_ids=ids, mask=MaskSpec(reading.attention, segment_ids=segments),
            positions=torch.arange(ids.shape[1]),  # each row one text from position 0
            targets=torch.full_like(ids, IGNORE_INDEX), predict_at={}, token_type_ids=types)
        self.add_targets(batch, rows, reading)
        return batch

    def add_targets(self, batch: Batch, rows: Sequence[Row], reading: Reading) -> None:
        """Fill in what the head predicts at, and the targets when the rows have them."""
        raise NotImplementedError

    def outputs(self, model, batch: Batch, unprojected: bool = False) -> dict:
        """`model`'s outputs for `batch`, as the loop asks of any objective."""
        return model(**batch.model_inputs(), unprojected=unprojected)

    def target_counts(self, batch: Batch) -> dict[str, Tensor]:
        return {self.name: torch.tensor(batch.input_ids.shape[0])}

    def loss(self, outputs: dict, batch: Batch) -> LossSum:
        raise NotImplementedError

    # --- predictions ----------------------------------------------------------------------

    def row_outputs(self, outputs: dict, batch: Batch) -> list:
        """The head's output for each row of `batch`, on the CPU."""
        raise NotImplementedError

    def predict(self, examples: Sequence, rows: Sequence[Row], outputs: Sequence) -> list:
        """One prediction per example from the outputs of its rows."""
        raise NotImplementedError

    def metrics(self, examples: Sequence, predictions: Sequence) -> dict[str, float]:
        raise NotImplementedError

    def item_scores(self, examples: Sequence, predictions: Sequence) -> list[float]:
        """One value per example whose mean is the main metric, for paired comparisons
        (lmlab.compare): the metric's own per-example score, or its linearisation."""
        raise NotImplementedError

    def report(self, out: Path, split: str, examples: Sequence, predictions: Sequence) -> None:
        """Write what this task shows of a split's predictions besides the metrics."""

    def describe(self, prediction: Any) -> dict:
        """A prediction as users of the Hugging Face pipelines know it, ready for JSON."""
        raise NotImplementedError
