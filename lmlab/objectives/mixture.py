"""Hybrid objectives: a per-batch mixture of rows, or an alternating schedule."""

from __future__ import annotations

from collections.abc import Callable
from itertools import accumulate

import torch
from torch import Tensor

from lmlab.model.masks import MaskSpec
from lmlab.model.selectors import Selector, stacked
from lmlab.objectives.base import Objective
from lmlab.objectives.batch import Batch
from lmlab.objectives.losses import IGNORE_INDEX, LossSum, cross_entropy
from lmlab.objectives.stepwise import StepwiseParts


def rows_per_objective(batch_size: int, weights: list[float]) -> list[int]:
    """Split `batch_size` rows in proportion to `weights` (largest remainder), then give any
    objective left without a row one from the largest share, so every head gets a gradient
    every step."""
    if batch_size < len(weights):
        raise ValueError(f"a batch of {batch_size} rows cannot hold {len(weights)} objectives")
    quotas = [batch_size * w / sum(weights) for w in weights]
    counts = [int(q) for q in quotas]
    by_remainder = sorted(range(len(weights)), key=lambda i: int(quotas[i]) - quotas[i])
    for i in by_remainder[: batch_size - sum(counts)]:
        counts[i] += 1
    for i in range(len(counts)):
        if counts[i] == 0:
            counts[counts.index(max(counts))] -= 1
            counts[i] = 1
    return counts


def as_prefix_mask(mask: MaskSpec, batch: int, length: int) -> MaskSpec:
    """Express any kind row-wise as a prefix mask (causal = prefix 0, bidirectional = T)."""
    if mask.kind == "prefix":
        prefix = mask.prefix_len
    else:
        prefix = torch.full((batch,), 0 if mask.kind == "causal" else length, dtype=torch.long)
    segments = mask.segment_ids
    if segments is None:
        segments = torch.ones(batch, length, dtype=torch.long)
    return MaskSpec("prefix", prefix_len=prefix, segment_ids=segments)


def concatenate_batches(parts: list[Batch], nothing: dict[str, Selector]) -> Batch:
    """Stack sub-batches' rows into one batch; what each head reads shifts with its rows.
    `nothing` holds each head's selector of nothing, for the parts without that head; its
    kind also says what a part's None (everything) is."""
    length = parts[0].input_ids.shape[1]
    masks = [as_prefix_mask(p.mask, len(p.input_ids), length) for p in parts]
    starts = list(accumulate((len(p.input_ids) for p in parts[:-1]), initial=0))

    def read_by(part: Batch, start: int, head: str) -> Selector:
        at = part.predict_at.get(head, nothing[head])
        at = type(nothing[head]).every(len(part.input_ids), length) if at is None else at
        return at.shifted(start, length)

    types = [p.token_type_ids if p.token_type_ids is not None
             else torch.zeros_like(p.input_ids) for p in parts]
    return Batch(
        input_ids=torch.cat([p.input_ids for p in parts]),
        mask=MaskSpec("prefix", prefix_len=torch.cat([m.prefix_len for m in masks]),
                      segment_ids=torch.cat([m.segment_ids for m in masks])),
        positions=torch.cat([p.positions for p in parts]),
        targets=torch.cat([p.targets for p in parts]),
        predict_at={head: stacked([read_by(part, start, head)
                                   for part, start in zip(parts, starts, strict=True)])
                    for head in nothing},
        token_type_ids=torch.cat(types),
        extras={"rows_per_objective": torch.tensor([len(p.input_ids) for p in parts])},
    )


class Mixture(Objective):
    """Every batch's rows split across token objectives by weight, in one forward pass; e.g.
    GPT-BERT (Charpentier & Samuel 2024): Mixture([CausalLM, MaskedLM(next_token=True)],
    [1, 15]). Rows of all kinds share one prefix-form mask. The loss pools all targets into
    one mean (each target counts once); each part's own mean is reported in `details`.
    """

    name = "mix"

    def __init__(self, objectives: list[Objective], weights: list[float]) -> None:
        if len(objectives) != len(weights) or not objectives:
            raise ValueError("a mixture needs one weight per objective")
        if min(weights) <= 0:
            raise ValueError("mixture weights must be positive")
        for objective in objectives:
            if objective.packing != "any":  # rows of one layout cannot suit both
                raise ValueError(f"{objective.name} needs whole-sentence rows, so it cannot "
                                 "be mixed; use it on its own")
        self.objectives, self.weights = objectives, weights
        names = [o.name for o in objectives]
        self.part_names = [n if names.count(n) == 1 else f"{n}#{i}" for i, n in enumerate(names)]

    def leaves(self) -> list[Objective]:
        return [leaf for o in self.objectives for leaf in o.leaves()]

    def for_run(self, total_steps: int) -> Mixture:
        return Mixture([o.for_run(total_steps) for o in self.objectives], self.weights)

    def predicted_fraction(self, rows: int, seq_len: int) -> float:
        return self._by_rows(rows, lambda o, count: o.predicted_fraction(count, seq_len))

    def target_fraction(self, rows: int, seq_len: int) -> float:
        return self._by_rows(rows, lambda o, count: o.target_fraction(count, seq_len))

    def target_bound(self, rows: int, seq_len: int) -> int:
        return sum(o.target_bound(count, seq_len) for o, count in zip(
            self.objectives, rows_per_objective(rows, self.weights), strict=True))

    def last_block_fraction(self, rows: int, seq_len: int) -> float:
        """With one head (GPT-BERT's clm + mntp), the parts' positions reach it as one set,
        where the last block runs; with several, it runs everywhere."""
        if len(self.heads) > 1:
            return 1.0
        return self._by_rows(rows, lambda o, count: o.last_block_fraction(count, seq_len))

    def _by_rows(self, rows: int, share: Callable[[Objective, int], float]) -> float:
        """Each part's `share` on the rows it gets: the weights as `rows_per_objective` rounds
        them, which for small micro-batches is not the weights themselves."""
        counts = rows_per_objective(rows, self.weights)
        return sum(count / rows * share(o, count)
                   for o, count in zip(self.objectives, counts, strict=True))

    def make_batch(self, tokens: Tensor, generator: torch.Generator, step: int = 0) -> Batch:
        counts = rows_per_objective(len(tokens), self.weights)
        rows = tokens.split(counts)
        return concatenate_batches([o.make_batch(r, generator, step)
                                    for o, r in zip(self.objectives, rows, strict=True)],
                                   self.reads_nothing())

    def target_counts(self, batch: Batch) -> dict[str, Tensor]:
        return {self.name: (batch.targets != IGNORE_INDEX).sum()}

    def loss(self, outputs: dict[str, Tensor], batch: Batch) -> LossSum:
        length = batch.input_ids.shape[1]
        row_ends = torch.cumsum(batch.extras["rows_per_objective"], 0)
        zero = batch.targets.new_zeros((), dtype=torch.float32)
        pooled = [zero, torch.tensor(0)]
        details = {name: [zero, torch.tensor(0)] for name in self.part_names}
        for head in self.heads:
            at = batch.predict_at[head]
            targets = at.read(batch.targets)
            loss_sum, losses = cross_entropy(outputs[head], targets)
            valid = targets != IGNORE_INDEX
            owner = torch.searchsorted(row_ends, at.flat // length, right=True)
            for index, name in enumerate(self.part_names):
                mine = owner == index
                details[name][0] = details[name][0] + (losses * mine).sum()
                details[name][1] = details[name][1] + (valid & mine).sum()
            pooled = [pooled[0] + loss_sum, pooled[1] + valid.sum()]
        return LossSum({self.name: tuple(pooled)},
                       details={name: tuple(v) for name, v in details.items()})


def steps_per_part(total_steps: int, every_steps: int, parts: int) -> list[int]:
    """The steps each of `parts` objectives trains in a run of `total_steps` that switches
    every `every_steps`: whole turns, then the last, cut short by the run's end."""
    turns, rest = divmod(total_steps, every_steps)
    cycles, extra = divmod(turns, parts)
    return [every_steps * (cycles + (part < extra)) + (rest if part == extra else 0)
            for part in range(parts)]


class Alternating(StepwiseParts):
    """Switch objective every `every_steps` optimiser steps (AntLM, Yu et al. 2024), e.g.
    Alternating([CausalLM(...), MaskedLM(...)], every_steps=1000). `total_steps`, the run's
    length once known (`for_run`), only weighs the parts' FLOPs."""

    name = "alternate"

    def __init__(self, objectives: list[Objective], every_steps: int,
                 total_steps: int | None = None) -> None:
        if not objectives or every_steps < 1:
            raise ValueError("alternation needs objectives and every_steps >= 1")
        self.objectives, self.every_steps = objectives, every_steps
        self.total_steps = total_steps

    def for_run(self, total_steps: int) -> Alternating:
        return Alternating([o.for_run(total_steps) for o in self.objectives], self.every_steps,
                           total_steps)

    def index_at(self, step: int) -> int:
        return (step // self.every_steps) % len(self.objectives)

    def steps_of_parts(self) -> list[float]:
        """Each part's steps in the run; equal until the run's length is known (the limit of
        a long run)."""
        if self.total_steps is None:
            return [1] * len(self.objectives)
        return steps_per_part(self.total_steps, self.every_steps, len(self.objectives))
