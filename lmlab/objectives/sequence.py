"""Objectives in sequence: one for the first part of a run, another for the rest, on the same
backbone (`then:clm,mlm@0.75`)."""

from __future__ import annotations

from lmlab.objectives.base import Objective
from lmlab.objectives.stepwise import StepwiseParts


def switch_step(fraction: float, total_steps: int) -> int:
    """The first step of the second objective: `fraction` of the run, rounded half up."""
    return int(fraction * total_steps + 0.5)


class Then(StepwiseParts):
    """The first objective for the first `fraction` of the run's optimiser steps, then the
    second, e.g. Then([CausalLM(...), MaskedLM(...)], 0.75): causal then masked LM, which beat
    masked LM alone at equal compute (Gisserot-Boukhlef et al. 2025). The switch step,
    round(fraction × total steps), is fixed once the run's length is known (`for_run`); the
    loop's step picks the part, so a resume continues on either side of it exactly.

    `then:clm,mlm@0.5` in a run of 4 steps switches at step round(0.5 × 4) = 2 (`|` = [EOS]
    closing a document, `M` = [MASK], `-` = ignored target):

        tokens      the cat sat |   a  dog
        inputs@1    the cat sat |   a  dog     causal LM: attention causal, within documents
        targets@1   cat sat  |  -  dog  -
        inputs@2    the  M  sat |   a  dog     masked LM: attention bidirectional
        targets@2    -  cat  -  -   -   -
    """

    name = "then"

    def __init__(self, objectives: list[Objective], fraction: float,
                 total_steps: int | None = None) -> None:
        if len(objectives) != 2:
            raise ValueError("a sequence takes two objectives, as in 'then:clm,mlm@0.75'")
        if not 0.0 < fraction < 1.0:
            raise ValueError(f"the switch must come within the run (0 < fraction < 1), as in "
                             f"'then:clm,mlm@0.75'; got {fraction:g}")
        self.objectives, self.fraction, self.total_steps = objectives, fraction, total_steps

    @property
    def switch_step(self) -> int | None:
        """The step the second objective starts at; None until the run's length is known."""
        return None if self.total_steps is None else switch_step(self.fraction, self.total_steps)

    def for_run(self, total_steps: int) -> Then:
        return Then([o.for_run(total_steps) for o in self.objectives], self.fraction,
                    total_steps)

    def index_at(self, step: int) -> int:
        """The part step `step` trains (the first until the run's length is known)."""
        return int(self.switch_step is not None and step >= self.switch_step)

    def steps_of_parts(self) -> list[float]:
        """Each phase's steps once the run's length is known, else `fraction` and its rest
        (the limit of a long run)."""
        first = self.switch_step
        if first is None or self.total_steps < 1:
            return [self.fraction, 1.0 - self.fraction]
        return [first, self.total_steps - first]
