"""Composites that train one part a step (an alternation, a sequence): the part a step trains
is named in the batch's host facts, every head of the composite is asked for in every batch
(the idle ones at no position), and what a step costs and predicts is each part's, weighted
by the steps it trains."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from lmlab.objectives.base import Objective
from lmlab.objectives.batch import Batch
from lmlab.objectives.losses import LossSum, empty_sum


class StepwiseParts(Objective):
    """The base of Alternating and Then: a subclass says which part a step trains
    (`index_at`) and how many steps each part trains in the run (`steps_of_parts`); the rest
    is here."""

    objectives: list[Objective]

    def index_at(self, step: int) -> int:
        raise NotImplementedError

    def steps_of_parts(self) -> list[float]:
        """The steps each part trains, or their proportions until the run's length is known
        (a FLOPs count of the run)."""
        raise NotImplementedError

    def leaves(self) -> list[Objective]:
        return [leaf for o in self.objectives for leaf in o.leaves()]

    def predicted_fraction(self, rows: int, seq_len: int) -> float:
        return self._by_steps(lambda o: o.predicted_fraction(rows, seq_len))

    def target_fraction(self, rows: int, seq_len: int) -> float:
        return self._by_steps(lambda o: o.target_fraction(rows, seq_len))

    def target_bound(self, rows: int, seq_len: int) -> int:
        """Whichever part trains, the largest of theirs."""
        return max(o.target_bound(rows, seq_len) for o in self.objectives)

    def last_block_fraction(self, rows: int, seq_len: int) -> float:
        """With several heads the last block runs everywhere (every batch asks them all)."""
        if len(self.heads) > 1:
            return 1.0
        return self._by_steps(lambda o: o.last_block_fraction(rows, seq_len))

    def _by_steps(self, share: Callable[[Objective], float]) -> float:
        """Each part's `share` weighted by the steps it trains."""
        steps = self.steps_of_parts()
        return sum(count / sum(steps) * share(o)
                   for o, count in zip(self.objectives, steps, strict=True))

    def make_batch(self, tokens: Tensor, generator: torch.Generator, step: int = 0) -> Batch:
        """The batch of the part `index_at(step)`, with the idle heads at no position (see
        `loss`)."""
        index = self.index_at(step)
        batch = self.objectives[index].make_batch(tokens, generator, step)
        batch.host_facts["objective_index"] = index
        for head, nothing in self.reads_nothing().items():
            batch.predict_at.setdefault(head, nothing)
        return batch

    def target_counts(self, batch: Batch) -> dict[str, Tensor]:
        return self.objectives[batch.host_facts["objective_index"]].target_counts(batch)

    def loss(self, outputs: dict[str, Tensor], batch: Batch) -> LossSum:
        """The current part's loss. The idle heads' outputs, on no position, add an exact zero
        that gives every head a (zero) gradient each step, as data parallelism requires."""
        part = self.objectives[batch.host_facts["objective_index"]]
        result = part.loss(outputs, batch)
        idle = sum(empty_sum(outputs[head]) for head in self.heads if head not in part.heads)
        term, (loss_sum, count) = next(iter(result.terms.items()))
        result.terms[term] = (loss_sum + idle, count)
        return result
