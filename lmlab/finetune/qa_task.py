"""Extractive question answering (SQuAD v1.1 and v2): a start and an end score per token, over
windows of long contexts; see qa_spans.py for the windows and the answer search."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace

import torch
import torch.nn.functional as F

from lmlab.data.errors import DataError
from lmlab.finetune.base import Row, Task
from lmlab.finetune.qa_spans import Answer, QuestionTooLong, best_answer, label_window, make_windows
from lmlab.objectives.batch import Batch
from lmlab.objectives.losses import LossSum
from lmlab.runs.schema import Reading
from lmlab.tasks.finetune_config import FinetuneConfig
from lmlab.tasks.framing import Encoder
from lmlab.tasks.metrics import squad_f1, squad_metrics
from lmlab.tasks.readers import QAExample

# Padding scores this low: no softmax mass, and no answer can start or end there.
NOT_A_POSITION = -1e4


def _framing_ids(encoder: Encoder) -> tuple[int | None, int | None]:
    """The ids Encoder frames rows with, for the windows: (leading, closing), None if none."""
    leader, ender = encoder.leader, encoder.ender
    return (leader[0] if leader else None), (ender[0] if ender else None)


class QATask(Task):
    @classmethod
    def resolved(cls, cfg: FinetuneConfig, train: Sequence[QAExample]) -> FinetuneConfig:
        """SQuAD v2: when the training set holds unanswerable questions, answering nothing is
        part of the task, so a null threshold (none asked for: 0) is set."""
        if cfg.null_threshold is None and any(not example.answers for example in train):
            return replace(cfg, null_threshold=0.0)
        return cfg

    def encode(self, examples: Sequence[QAExample], encoder: Encoder,
               training: bool) -> list[Row]:
        rows = []
        for index, example in enumerate(examples):
            question = encoder.ids(example.question)
            context, offsets = encoder.with_offsets(example.context)
            try:
                windows = make_windows(index, question, context, offsets,
                                       *_framing_ids(encoder), encoder.max_len,
                                       self.cfg.doc_stride)
            except QuestionTooLong as error:
                raise DataError(f"question {example.id!r}: {error}") from None
            for window in windows:
                if example.answers:
                    text, start = example.answers[0]
                    window = label_window(window, start, start + len(text))
                rows.append(Row(window.input_ids, window.token_type_ids, index,
                                (window.start, window.end), {"window": window}))
        return rows

    def add_targets(self, batch: Batch, rows: Sequence[Row], reading: Reading) -> None:
        batch.predict_at[self.head] = None
        starts, ends = zip(*(row.target for row in rows), strict=True)
        batch.extras["start"] = torch.tensor(starts)
        batch.extras["end"] = torch.tensor(ends)

    def _logits(self, outputs: dict, batch: Batch) -> torch.Tensor:
        """(B, T, 2) scores, padding ruled out."""
        logits = outputs[self.head].float()
        padding = (batch.mask.segment_ids == 0).unsqueeze(-1)
        return logits.masked_fill(padding, NOT_A_POSITION)

    def loss(self, outputs: dict, batch: Batch) -> LossSum:
        logits = self._logits(outputs, batch)
        start = F.cross_entropy(logits[..., 0], batch.extras["start"], reduction="sum")
        end = F.cross_entropy(logits[..., 1], batch.extras["end"], reduction="sum")
        # BERT's span loss: the mean of the start and end cross-entropies.
        return LossSum({self.name: ((start + end) / 2, torch.tensor(len(logits)))})

    def row_outputs(self, outputs: dict, batch: Batch) -> list:
        logits = self._logits(outputs, batch).cpu().numpy()
        lengths = (batch.mask.segment_ids > 0).sum(dim=1).tolist()
        return [(row[:length, 0], row[:length, 1]) for row, length in zip(logits, lengths,
                                                                           strict=True)]

    def predict(self, examples, rows, outputs) -> list[Answer]:
        by_example = defaultdict(list)
        for row, output in zip(rows, outputs, strict=True):
            by_example[row.example].append((row.extra["window"], output))
        answers = []
        for index, example in enumerate(examples):
            windows, logits = zip(*by_example[index], strict=True)
            answers.append(best_answer(
                windows, [start for start, _ in logits], [end for _, end in logits],
                example.context, self.cfg.n_best, self.cfg.max_answer_len,
                self.cfg.null_threshold))
        return answers

    def metrics(self, examples, predictions) -> dict[str, float]:
        golds = [[text for text, _ in example.answers] for example in examples]
        return squad_metrics([answer.text for answer in predictions], golds)

    def item_scores(self, examples, predictions) -> list[float]:
        return [100 * squad_f1(answer.text, [text for text, _ in example.answers])
                for example, answer in zip(examples, predictions, strict=True)]

    def describe(self, prediction: Answer) -> dict:
        return {"answer": prediction.text, "score": prediction.score,
                "start": prediction.start, "end": prediction.end}
