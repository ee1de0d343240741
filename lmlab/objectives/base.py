"""The Objective protocol: what every pre-training objective declares and does.

An objective is pure: `make_batch(tokens, generator, step)` turns a (B, T) block of token ids
into a Batch using only the ids, the special-token ids and the given torch.Generator;
`loss(outputs, batch)` turns model outputs into summed losses with their target counts. The
training loop divides each sum by its count gathered over micro-batches and ranks, so gradient
accumulation and data parallelism give the gradient of one big batch.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lmlab.config import ModelConfig
from lmlab.model.heads import Head, make_head
from lmlab.model.selectors import Positions, Selector
from lmlab.objectives.batch import Batch
from lmlab.objectives.losses import IGNORE_INDEX, LossSum, token_loss_sum
from lmlab.objectives.traits import Traits


class Objective:
    """Base for objectives. A plain objective declares its `traits` and, by default, has one
    vocabulary head and one loss term; a composite (Mixture, Alternating) overrides `leaves`,
    and every capability below is then read off its parts. A plain objective refuses, when
    built, special tokens that lack one its traits need (`SpecialTokens.require_all`)."""

    name: str = "objective"
    title: str = "objective"  # how messages name it: what it is, then its spec in parentheses
    traits: Traits

    def make_batch(self, tokens: Tensor, generator: torch.Generator, step: int = 0) -> Batch:
        raise NotImplementedError

    # Whether its step runs the model more than once (a generator, then the model): such an
    # objective makes its own `outputs`, and cannot share a step with another.
    two_passes = False

    def outputs(self, model, batch: Batch, unprojected: bool = False) -> dict[str, Tensor]:
        """`model`'s outputs for `batch`, as `loss` reads them: one forward pass."""
        return model(**batch.model_inputs(), unprojected=unprojected)

    def head_options(self) -> dict[str, dict]:
        """Each of its heads → the options it is built with (lmlab.model.heads.make_head)."""
        return {head: {} for head in self.heads}

    def build_heads(self, cfg: ModelConfig) -> dict[str, Head]:
        """Its heads for a model of shape `cfg`, as pre-training builds them."""
        return {name: make_head(name, cfg, **options)
                for name, options in self.head_options().items()}

    def companion_models(self, cfg, rows: int, seq_len: int) -> list[tuple]:
        """Other models a step trains beside the one of shape `cfg` (a generator), each as
        (its ModelConfig, the share of positions it projects to the vocabulary), for FLOP
        counting (lmlab.train.flops); none for a single-pass objective."""
        return []

    def target_counts(self, batch: Batch) -> dict[str, Tensor]:
        """Each loss term's target count, known before the forward pass, so the loop can
        gather global counts across micro-batches and ranks first."""
        return {self.name: (batch.targets != IGNORE_INDEX).sum()}

    def loss(self, outputs: dict[str, Tensor], batch: Batch) -> LossSum:
        (head,) = self.heads
        return LossSum({self.name: token_loss_sum(outputs[head], batch.targets,
                                                  batch.predict_at[head])})

    @property
    def token_term(self) -> str:
        """The loss term of its token predictions (perplexity, accuracy)."""
        return self.name

    def for_run(self, total_steps: int) -> Objective:
        """This objective for a run of `total_steps` (schedules over the whole run need its
        length, known only once the budget is timed); itself when nothing depends on it."""
        return self

    def for_evaluation(self) -> Objective:
        """The objective validation scores with: itself, unless its training randomness
        should be fixed so that runs stay comparable (see MaskedLM)."""
        return self

    # What a model trained with this objective can do, read off the plain objectives in it.

    def leaves(self) -> list[Objective]:
        """The plain objectives this one is made of (itself when it is plain)."""
        return [self]

    def evaluated_leaves(self) -> dict[str, Objective]:
        """The plain objectives in this one by name, each as validation scores it."""
        found: dict[str, Objective] = {}
        for leaf in self.leaves():
            found.setdefault(leaf.name, leaf.for_evaluation())
        return found

    @property
    def heads(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(h for leaf in self.leaves() for h in leaf.traits.heads))

    def reads_nothing(self) -> dict[str, Selector]:
        """Each of its heads asked to read nothing, as a composite asks for its idle parts'
        heads (lmlab.objectives.mixture): a plain objective's vocabulary heads at no position;
        a composite's, as its parts ask for theirs."""
        if self.leaves() == [self]:
            return {head: Positions.nowhere() for head in self.heads}
        return {head: nothing for leaf in self.leaves()
                for head, nothing in leaf.reads_nothing().items()}

    @property
    def reads_only_bidirectionally(self) -> bool:
        """Every part attends both ways (masked LM, NSP): nothing is read left to right."""
        return all(leaf.traits.attention == "bidirectional" for leaf in self.leaves())

    @property
    def packing(self) -> str:
        needs = {leaf.traits.packing for leaf in self.leaves()}
        return "sentences" if "sentences" in needs else "any"

    @property
    def framing(self) -> str:
        framings = {leaf.traits.framing for leaf in self.leaves()}
        return "pair" if "pair" in framings else "document"

    @property
    def generation_modes(self) -> set[str]:
        return {leaf.traits.generation for leaf in self.leaves()} - {None}

    @property
    def can_generate(self) -> bool:
        return bool(self.generation_modes)

    @property
    def fill_mask_head(self) -> tuple[str, int] | None:
        """(head, shift) that predicts a [MASK] `shift` positions before it, or None."""
        found = [leaf.traits.fill_mask for leaf in self.leaves() if leaf.traits.fill_mask]
        return found[0] if found else None

    @property
    def reads_causally(self) -> bool:
        """Whether the model only ever read text left to right."""
        return all(leaf.traits.attention == "causal" for leaf in self.leaves())

    def predicted_fraction(self, rows: int, seq_len: int) -> float:
        """The expected share of a (rows, seq_len) micro-batch's positions at which training
        runs a vocabulary projection, for FLOP counting (lmlab.train.flops): the fused
        projection and cross-entropy skip positions without a target, so it is the share that
        carries one. Each objective counts its own."""
        raise NotImplementedError

    def target_fraction(self, rows: int, seq_len: int) -> float:
        """The expected share of positions that carry a training target (what `compare`
        reports as supervised predictions): those the vocabulary projection runs at, unless
        the objective learns elsewhere too."""
        return self.predicted_fraction(rows, seq_len)

    def warnings(self, metrics: dict[str, float]) -> list[str]:
        """What this objective's validation metrics (lmlab.train.validation, keyed
        `{name}/...`) say has gone wrong, one line each; nothing unless the objective knows a
        failure of its own to look for."""
        return []

    def budget_warnings(self, tokens: int) -> list[str]:
        """What lmlab has measured this objective to do in a run of `tokens` training
        tokens, said before it starts, one line each; nothing unless it measured a budget
        too small for it."""
        return []

    def target_bound(self, rows: int, seq_len: int) -> int:
        """At most how many positions a head of a (rows, seq_len) micro-batch reads: what a
        compiled step pads `Positions` to, so that one graph serves every batch. Every
        position, unless the objective knows better."""
        return rows * seq_len

    # Whether its batches name their target positions in `predict_at`, so that the head, and
    # with one head the model's last block past attention, run there only (LanguageModel).
    predicts_at_targets = False

    def last_block_fraction(self, rows: int, seq_len: int) -> float:
        """The expected share of positions at which the model's last block runs past its
        attention: the predicted share when one head reads its target positions alone, else
        all of them."""
        if self.predicts_at_targets and len(self.heads) == 1:
            return self.predicted_fraction(rows, seq_len)
        return 1.0
