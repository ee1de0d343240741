"""Tasks with one prediction per text or pair of texts: classify, and the pairs task (e.g. NLI),
which differs from it only in its traits (it requires a second text), and regress (e.g. relatedness
1–5). The sequence head pools each row as the run's `Reading` says: a row read at its last
token (a causal model's) is scored as GPT scores it, by one bias-free linear layer on that
token's state, which is what Hugging Face's GPT-2 and Llama sequence classes compute; [CLS] and
mean poolings go through BERT's pooler first. The choice is recorded among the head's options,
so runs saved before it (a pooler everywhere) load as they were trained."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from lmlab.finetune.base import Row, Task, pooling_weights
from lmlab.model.selectors import Pooling
from lmlab.objectives.batch import Batch
from lmlab.objectives.losses import LossSum
from lmlab.runs.plots import plot_confusion_matrix
from lmlab.runs.schema import Reading
from lmlab.tasks.framing import Encoder
from lmlab.tasks.metrics import (
    classification_metrics,
    confusion_matrix,
    pearson_items,
    regression_metrics,
)
from lmlab.tasks.readers import TextExample


@dataclass(frozen=True)
class LabelPrediction:
    label: int
    scores: np.ndarray  # probability of each label


class ClassifyTask(Task):
    """One text, or two read as `[CLS] A [SEP] B [SEP]` with token types 0 and 1 → one of N
    labels (cross-entropy on the pooled row)."""

    label_type = torch.long

    def __init__(self, cfg, labels: Sequence[str] | None = None, train: Sequence = ()) -> None:
        super().__init__(cfg, labels, train)
        self.label_weights = None
        if cfg.class_weights == "balanced" and train:
            self.label_weights = balanced_weights(
                [self.labels.index(example.label) for example in train], len(self.labels))

    def head_options(self) -> dict:
        return {**super().head_options(), "pooler": self.cfg.pooling != "last"}

    def target_of(self, example: TextExample):
        return None if example.label is None else self.labels.index(example.label)

    def encode(self, examples: Sequence[TextExample], encoder: Encoder,
               training: bool) -> list[Row]:
        rows = []
        for index, example in enumerate(examples):
            ids, types = encoder.pair(example.text, example.text_pair)
            rows.append(Row(ids, types, index, self.target_of(example)))
        return rows

    def add_targets(self, batch: Batch, rows: Sequence[Row], reading: Reading) -> None:
        lengths = [len(row.ids) for row in rows]
        batch.predict_at[self.head] = Pooling(pooling_weights(lengths, batch.input_ids.shape[1],
                                                              reading.pooling))
        if all(row.target is not None for row in rows):
            batch.extras["label"] = torch.tensor([row.target for row in rows],
                                                 dtype=self.label_type)

    def loss(self, outputs: dict, batch: Batch) -> LossSum:
        logits = outputs[self.head].float()
        weights = None if self.label_weights is None else self.label_weights.to(logits.device)
        # Balanced weights average 1 over the training rows, so the loop's division by the
        # row count keeps the loss's scale.
        total = F.cross_entropy(logits, batch.extras["label"], weight=weights, reduction="sum")
        return LossSum({self.name: (total, torch.tensor(len(logits)))})

    def row_outputs(self, outputs: dict, batch: Batch) -> list:
        return list(outputs[self.head].float().softmax(-1).cpu().numpy())

    def predict(self, examples, rows, outputs) -> list[LabelPrediction]:
        return [LabelPrediction(int(np.argmax(scores)), scores) for scores in outputs]

    def metrics(self, examples, predictions) -> dict[str, float]:
        gold = [self.labels.index(example.label) for example in examples]
        return classification_metrics(gold, [p.label for p in predictions], len(self.labels))

    def item_scores(self, examples, predictions) -> list[float]:
        return [float(self.labels.index(example.label) == prediction.label)
                for example, prediction in zip(examples, predictions, strict=True)]

    def report(self, out: Path, split: str, examples, predictions) -> None:
        gold = [self.labels.index(example.label) for example in examples]
        matrix = confusion_matrix(gold, [p.label for p in predictions], len(self.labels))
        plot_confusion_matrix(matrix, self.labels, out / f"confusion-{split}.png")

    def describe(self, prediction: LabelPrediction) -> dict:
        scores = {name: float(p) for name, p in zip(self.labels, prediction.scores, strict=True)}
        return {"label": self.labels[prediction.label],
                "score": scores[self.labels[prediction.label]], "scores": scores}


def balanced_weights(labels: Sequence[int], count: int) -> torch.Tensor:
    """(count,) weight of each label: rows / (count × the label's rows), scikit-learn's
    "balanced"; a label no training row has weighs nothing."""
    rows = torch.bincount(torch.tensor(labels), minlength=count).float()
    return torch.where(rows > 0, len(labels) / (count * rows.clamp(min=1)), 0.0)


class RegressTask(ClassifyTask):
    """One or two texts → a number, with a squared-error loss on one output."""

    label_type = torch.float32

    def head_options(self) -> dict:
        return {**super().head_options(), "num_labels": 1}

    def target_of(self, example: TextExample):
        return example.label

    def loss(self, outputs: dict, batch: Batch) -> LossSum:
        predicted = outputs[self.head].float().squeeze(-1)
        total = F.mse_loss(predicted, batch.extras["label"], reduction="sum")
        return LossSum({self.name: (total, torch.tensor(len(predicted)))})

    def row_outputs(self, outputs: dict, batch: Batch) -> list:
        return outputs[self.head].float().squeeze(-1).cpu().tolist()

    def predict(self, examples, rows, outputs) -> list[float]:
        return list(outputs)

    def metrics(self, examples, predictions) -> dict[str, float]:
        return regression_metrics([example.label for example in examples], predictions)

    def item_scores(self, examples, predictions) -> list[float]:
        return pearson_items([example.label for example in examples], predictions).tolist()

    def report(self, out: Path, split: str, examples, predictions) -> None:
        pass  # a confusion matrix has no meaning for numbers

    def describe(self, prediction: float) -> dict:
        return {"score": float(prediction)}
