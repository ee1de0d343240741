"""Named-entity recognition: a BIO tag per word, read from the word's first piece (the other
pieces are not scored, so a word split in several pieces still counts once)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from lmlab.atomic import atomic_write
from lmlab.finetune.base import Row, Task
from lmlab.kernels.linear_cross_entropy import IGNORE_INDEX
from lmlab.model.selectors import Positions
from lmlab.objectives.batch import Batch
from lmlab.objectives.losses import LossSum
from lmlab.runs.schema import Reading
from lmlab.tasks.framing import Encoder, Words, first_pieces
from lmlab.tasks.metrics import entity_f1_items, entity_metrics, entity_spans
from lmlab.tasks.readers import TaggedSentence


@dataclass(frozen=True)
class Tagged:
    """Predicted tags of a sentence's words, each with its probability."""

    words: Words
    tags: tuple[str, ...]
    scores: tuple[float, ...]


def continuation_tag(tag: str, labels: Sequence[str]) -> str:
    """The tag of a word's later pieces when all pieces are trained: a B- word continues
    with I- (when that tag exists), so no piece but the first opens an entity."""
    inside = "I-" + tag[2:]
    return inside if tag.startswith("B-") and inside in labels else tag


class NERTask(Task):
    def encode(self, examples, encoder: Encoder, training: bool) -> list[Row]:
        rows = []
        for index, example in enumerate(examples):
            words = example if isinstance(example, Words) else Words.joined(example.words)
            ids, word_ids = encoder.words(words)
            targets = None
            if isinstance(example, TaggedSentence):
                targets = self._piece_targets(example.tags, word_ids,
                                              all_pieces=training and self.cfg.label_all_pieces)
            rows.append(Row(ids, [0] * len(ids), index, targets,
                            {"word_ids": word_ids, "words": words}))
        return rows

    def _piece_targets(self, tags: Sequence[str], word_ids: Sequence[int | None],
                       all_pieces: bool) -> list[int]:
        targets = [IGNORE_INDEX] * len(word_ids)
        first = set(first_pieces(word_ids))
        for position, word in enumerate(word_ids):
            if position in first:
                targets[position] = self.labels.index(tags[word])
            elif word is not None and all_pieces:
                targets[position] = self.labels.index(continuation_tag(tags[word], self.labels))
        return targets

    def add_targets(self, batch: Batch, rows: Sequence[Row], reading: Reading) -> None:
        scored = torch.zeros(batch.input_ids.shape, dtype=torch.bool)
        for index, row in enumerate(rows):
            scored[index, first_pieces(row.extra["word_ids"])] = True
            if row.target is not None:
                targets = torch.tensor(row.target)
                batch.targets[index, : len(targets)] = targets
        scored |= batch.targets != IGNORE_INDEX
        batch.predict_at[self.head] = Positions.where(scored)

    def target_counts(self, batch: Batch) -> dict[str, torch.Tensor]:
        return {self.name: (batch.targets != IGNORE_INDEX).sum()}

    def loss(self, outputs: dict, batch: Batch) -> LossSum:
        targets = batch.predict_at[self.head].read(batch.targets)
        total = F.cross_entropy(outputs[self.head].float(), targets, ignore_index=IGNORE_INDEX,
                                reduction="sum")
        return LossSum({self.name: (total, (targets != IGNORE_INDEX).sum())})

    def row_outputs(self, outputs: dict, batch: Batch) -> list:
        """Per row: the tag probabilities of each word's first piece, (words, labels)."""
        probabilities = outputs[self.head].float().softmax(-1).cpu()
        at = batch.predict_at[self.head].flat.cpu()
        width = batch.input_ids.shape[1]
        found = []
        for row in range(batch.input_ids.shape[0]):
            in_row = (at >= row * width) & (at < (row + 1) * width)
            found.append((at[in_row] - row * width, probabilities[in_row]))
        return found

    def predict(self, examples, rows, outputs) -> list[Tagged]:
        tagged = []
        for row, (positions, probabilities) in zip(rows, outputs, strict=True):
            words = row.extra["words"]
            by_position = dict(zip(positions.tolist(), probabilities.numpy(), strict=True))
            tags, scores = ["O"] * len(words.words), [0.0] * len(words.words)  # words cut off
            for word, position in zip(range(len(words.words)),
                                      first_pieces(row.extra["word_ids"]), strict=False):
                best = int(np.argmax(by_position[position]))
                tags[word], scores[word] = self.labels[best], float(by_position[position][best])
            tagged.append(Tagged(words, tuple(tags), tuple(scores)))
        return tagged

    def metrics(self, examples, predictions) -> dict[str, float]:
        found = entity_metrics([example.tags for example in examples],
                               [prediction.tags for prediction in predictions])
        per_type = found.pop("per_type")
        for kind, scores in per_type.items():
            found[f"f1_{kind}"] = scores["f1"]
        return found

    def item_scores(self, examples, predictions) -> list[float]:
        return entity_f1_items([example.tags for example in examples],
                               [prediction.tags for prediction in predictions]).tolist()

    def report(self, out: Path, split: str, examples, predictions) -> None:
        write_conll(out / f"predictions-{split}.conll", examples, predictions)

    def describe(self, prediction: Tagged) -> dict:
        """Entities grouped from the tags, as the HF pipeline's `aggregation_strategy`
        groups them: type, mean word score, the text and its character span."""
        words, entities = prediction.words, []
        text = words.text()
        for kind, first, last in entity_spans(prediction.tags):
            start, end = words.spans[first][0], words.spans[last - 1][1]
            entities.append({"entity_group": kind,
                             "score": float(np.mean(prediction.scores[first:last])),
                             "word": text[start:end], "start": start, "end": end})
        return {"entities": entities}


def write_conll(path: str | Path, examples: Sequence[TaggedSentence],
                predictions: Sequence[Tagged]) -> None:
    """`word<TAB>gold<TAB>predicted`, a blank line between sentences (conlleval's layout)."""
    with atomic_write(path) as file:
        for example, prediction in zip(examples, predictions, strict=True):
            for word, gold, tag in zip(example.words, example.tags, prediction.tags,
                                       strict=True):
                file.write(f"{word}\t{gold}\t{tag}\n")
            file.write("\n")
