"""BERT pre-training: masked LM plus next-sentence prediction (Devlin et al. 2019)."""

from __future__ import annotations

from dataclasses import replace

import torch
import torch.nn.functional as F
from torch import Tensor

from lmlab.model.masks import MaskSpec
from lmlab.model.selectors import Positions, Rows, Selector
from lmlab.objectives.base import Objective
from lmlab.objectives.batch import Batch
from lmlab.objectives.documents import block_pad_id
from lmlab.objectives.losses import IGNORE_INDEX, LossSum
from lmlab.objectives.mlm import MaskedLM
from lmlab.objectives.traits import Traits

IS_NEXT, NOT_NEXT = 0, 1  # Hugging Face's convention for next_sentence_label


def split_sentences(row: Tensor, sep: int, pad: int) -> list[Tensor]:
    """The non-empty [SEP]-separated sentences of a padded row."""
    real = row[row != pad]
    bounds = (real == sep).nonzero().squeeze(1).tolist()
    pieces, start = [], 0
    for stop in [*bounds, len(real)]:
        if stop > start:
            pieces.append(real[start:stop])
        start = stop + 1
    return pieces


def truncate_pair(first: Tensor, second: Tensor, budget: int) -> tuple[Tensor, Tensor]:
    """Trim the longer of the two from its end until both fit in `budget` tokens."""
    while len(first) + len(second) > budget:
        if len(first) > len(second):
            first = first[:-1]
        else:
            second = second[:-1]
    return first, second


class MaskedLMWithNSP(Objective):
    """Input rows hold consecutive sentences of one document each, separated by [SEP]
    (rows come from different documents). Each row becomes `[CLS] A [SEP] B [SEP]`:

        row      s1 [SEP] s2 [SEP] s3            another row:  t1 [SEP] t2
        IsNext   [CLS] s1 [SEP] s2 s3 [SEP]       types 0 0 0 1 1 1
        NotNext  [CLS] s1 [SEP] t2 [SEP]          B from another row's document

    then masked as by MaskedLM. Loss = mean MLM loss + mean NSP loss, both reported.
    """

    name = "mlm+nsp"
    title = "masked LM with next-sentence prediction (mlm+nsp)"

    def __init__(self, mlm: MaskedLM) -> None:
        self.mlm = mlm
        self.special = mlm.special
        self.special.require_all(self.traits.needs, self.title)

    @property
    def traits(self) -> Traits:
        return replace(self.mlm.traits, heads=(self.mlm.head, "nsp"), packing="sentences",
                       framing="pair", needs=(*self.mlm.traits.needs, "cls", "sep"))

    @property
    def token_term(self) -> str:
        return self.mlm.name

    def reads_nothing(self) -> dict[str, Selector]:
        return {**super().reads_nothing(), "nsp": Rows.nowhere()}

    def for_run(self, total_steps: int) -> MaskedLMWithNSP:
        return MaskedLMWithNSP(self.mlm.for_run(total_steps))

    def for_evaluation(self) -> MaskedLMWithNSP:
        return MaskedLMWithNSP(self.mlm.for_evaluation())

    def target_bound(self, rows: int, seq_len: int) -> int:
        return self.mlm.target_bound(rows, seq_len)

    def predicted_fraction(self, rows: int, seq_len: int) -> float:
        """The masked LM's share. The NSP head (a d×d pooler and a two-way classifier at one
        position per row) adds 6·(d² + 2d) / seq_len FLOPs per token, negligible beside a
        block's 72·d², and is not counted."""
        return self.mlm.predicted_fraction(rows, seq_len)

    def target_fraction(self, rows: int, seq_len: int) -> float:
        """The masked LM's share, and each row's next-sentence label."""
        return self.mlm.target_fraction(rows, seq_len) + 1 / seq_len

    def _pick_b(self, rows: list[list[Tensor]], index: int, split: int,
                generator: torch.Generator) -> tuple[list[Tensor], int]:
        if len(rows) < 2 or torch.rand(1, generator=generator).item() < 0.5:
            return rows[index][split:], IS_NEXT
        other = (index + int(torch.randint(1, len(rows), (1,), generator=generator))) % len(rows)
        start = int(torch.randint(len(rows[other]), (1,), generator=generator))
        return rows[other][start:], NOT_NEXT

    def make_batch(self, tokens: Tensor, generator: torch.Generator, step: int = 0) -> Batch:
        special, pad = self.special, block_pad_id(self.special)
        batch, block_len = tokens.shape
        rows = [split_sentences(row, special.sep, pad) for row in tokens]
        for row_index, sentences in enumerate(rows):
            if len(sentences) == 1 and len(sentences[0]) > 1:  # one long sentence: halve it
                half = len(sentences[0]) // 2
                rows[row_index] = [sentences[0][:half], sentences[0][half:]]
            elif not sentences:
                raise ValueError(f"row {row_index} holds no sentence for next-sentence prediction")
        pairs = torch.full_like(tokens, pad)
        types = torch.zeros_like(tokens)
        labels = torch.empty(batch, dtype=torch.long)
        for i, sentences in enumerate(rows):
            split = 1 + int(torch.randint(max(len(sentences) - 1, 1), (1,), generator=generator))
            b_sentences, labels[i] = self._pick_b(rows, i, split, generator)
            first = torch.cat(sentences[:split])
            second = torch.cat(b_sentences) if b_sentences else first.new_empty(0)
            first, second = truncate_pair(first, second, block_len - 3)
            a_part = torch.cat((torch.tensor([special.cls]), first, torch.tensor([special.sep])))
            b_part = torch.cat((second, torch.tensor([special.sep])))
            pairs[i, : len(a_part)] = a_part
            pairs[i, len(a_part): len(a_part) + len(b_part)] = b_part
            types[i, len(a_part): len(a_part) + len(b_part)] = 1
        inputs, targets = self.mlm.corrupt(pairs, generator, step)
        segments = (pairs != pad).long()
        return Batch(
            input_ids=inputs, mask=MaskSpec("bidirectional", segment_ids=segments),
            positions=torch.arange(block_len), targets=targets,  # one pair a row, from 0
            predict_at={self.mlm.head: Positions.where(targets != IGNORE_INDEX), "nsp": None},
            token_type_ids=types, extras={"nsp_label": labels},
        )

    def target_counts(self, batch: Batch) -> dict[str, Tensor]:
        return {**self.mlm.target_counts(batch),
                "nsp": torch.tensor(len(batch.extras["nsp_label"]))}

    def loss(self, outputs: dict[str, Tensor], batch: Batch) -> LossSum:
        mlm_terms = self.mlm.loss(outputs, batch).terms
        labels = batch.extras["nsp_label"]
        nsp_sum = F.cross_entropy(outputs["nsp"].float(), labels, reduction="sum")
        return LossSum({**mlm_terms, "nsp": (nsp_sum, torch.tensor(len(labels)))})
