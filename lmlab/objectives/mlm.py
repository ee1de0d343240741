"""Masked language modelling (Devlin et al. 2019) and its common variants."""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, replace
from typing import Literal

import torch
from torch import Tensor

from lmlab.data.special_tokens import SpecialTokens
from lmlab.model.masks import MaskSpec
from lmlab.model.selectors import Positions
from lmlab.objectives import masking
from lmlab.objectives.base import Objective
from lmlab.objectives.batch import Batch
from lmlab.objectives.documents import attention_segments, document_layout
from lmlab.objectives.losses import IGNORE_INDEX
from lmlab.objectives.traits import Traits

EVAL_MASK_RATE = 0.15


@dataclass(frozen=True)
class LinearRate:
    """A masking rate moving linearly from `start` to `end` over `steps` (then constant);
    e.g. LinearRate(0.30, 0.15, 10_000) as in Ankner et al. 2024. `steps=None` means over the
    whole run, fixed once its length is known (`MaskedLM.for_run`); until then the rate stays
    at `start`."""

    start: float
    end: float
    steps: int | None = None

    def __call__(self, step: int) -> float:
        if self.steps is None:
            return self.start
        progress = min(max(step / max(self.steps, 1), 0.0), 1.0)
        return self.start + (self.end - self.start) * progress


@dataclass(frozen=True)
class StagedRate:
    """Masking rates held in turn over equal shares of `steps`, e.g. StagedRate((0.30, 0.15,
    0.05)): 30% of tokens in the first third, 15% in the second, 5% in the last, as mmBERT
    (Marone et al. 2025) lowers its rate from pre-training to mid-training to decay (there in
    stages of unequal length). `steps=None`: over the whole run, as LinearRate."""

    rates: tuple[float, ...]
    steps: int | None = None

    def __call__(self, step: int) -> float:
        if self.steps is None:
            return self.rates[0]
        stage = min(max(step, 0) * len(self.rates) // max(self.steps, 1), len(self.rates) - 1)
        return self.rates[stage]


RATE_SCHEDULES = (LinearRate, StagedRate)


def _schedule_rates(rate: float | LinearRate | StagedRate) -> tuple[float, ...]:
    """Every rate a schedule takes for long: its ends, its stages, or the one rate."""
    if isinstance(rate, LinearRate):
        return rate.start, rate.end
    return rate.rates if isinstance(rate, StagedRate) else (rate,)


class MaskedLM(Objective):
    """Select `rate` of the ordinary tokens, corrupt them 80/10/10, predict the originals.

    Before / after (rate 0.3, `M` = [MASK], `-` = ignored target):

        tokens   [CLS] the  cat  sat  down [SEP]
        inputs   [CLS] the  M    sat  mat  [SEP]     (cat → [MASK], down → random "mat")
        targets    -    -   cat   -   down   -

    Options: `selection="exact"` selects exactly round(rate × eligible) per row; `whole_word`
    selects whole words, using a per-vocabulary `word_start_table`; `rate` may be a LinearRate
    or StagedRate schedule; `next_token` (GPT-BERT, Charpentier & Samuel 2024) predicts each
    masked token at the position before it, so the same head and shift serve masked and
    causal rows.
    """

    name = "mlm"
    predicts_at_targets = True

    def __init__(self, special: SpecialTokens, rate: float | LinearRate | StagedRate = 0.15,
                 mask_prob: float = 0.8, random_prob: float = 0.1,
                 selection: Literal["bernoulli", "exact"] = "bernoulli",
                 whole_word: bool = False, word_start_table: Tensor | None = None,
                 next_token: bool = False, head: str | None = None) -> None:
        if not 0.0 <= mask_prob + random_prob <= 1.0 or min(mask_prob, random_prob) < 0:
            raise ValueError("mask_prob and random_prob must be >= 0 and sum to at most 1")
        if whole_word and word_start_table is None:
            raise ValueError("whole-word masking needs a word_start_table from the tokenizer")
        if selection not in ("bernoulli", "exact"):
            raise ValueError(f"selection must be 'bernoulli' or 'exact', got {selection!r}")
        self.special = special
        self.rate = rate
        self.mask_prob, self.random_prob = mask_prob, random_prob
        self.selection, self.whole_word = selection, whole_word
        self.word_start_table = word_start_table
        self.next_token = next_token
        self.head = head or ("lm" if next_token else "mlm")
        special.require_all(self.traits.needs, self.title)
        self._special_table = special.special_table()
        self._ordinary_ids = special.ordinary_ids()

    @property
    def title(self) -> str:
        return "masked next-token prediction (mntp)" if self.next_token else "masked LM (mlm)"

    @property
    def traits(self) -> Traits:
        # A masked next-token model predicts each mask from the position before it.
        return Traits(attention="bidirectional", heads=(self.head,),
                      scoring="pseudo-next" if self.next_token else "pseudo",
                      fill_mask=(self.head, 1 if self.next_token else 0),
                      needs=("mask", "pad"))

    def predicted_fraction(self, rows: int, seq_len: int) -> float:
        """The masking rate, for a schedule its mean over the schedule (the run's mean where it
        spans the run, as `--mlm-rate-start` and `--mlm-rate-schedule` do); the few special
        tokens (never selected) are not discounted."""
        rates = _schedule_rates(self.rate)
        return sum(rates) / len(rates)

    def target_bound(self, rows: int, seq_len: int) -> int:
        """The expected count at the highest rate plus 8 standard deviations of a binomial
        draw, rounded up to 64 (a batch beyond it, about never, is padded to every position);
        whole words vary more, so for them every position."""
        positions = rows * seq_len
        if self.whole_word:
            return positions
        mean = positions * max(_schedule_rates(self.rate))
        return min(positions, math.ceil((mean + 8 * math.sqrt(mean) + 1) / 64) * 64)

    def for_run(self, total_steps: int) -> MaskedLM:
        if not isinstance(self.rate, RATE_SCHEDULES) or self.rate.steps is not None:
            return self
        fixed = copy.copy(self)
        fixed.rate = replace(self.rate, steps=total_steps)
        return fixed

    def for_evaluation(self) -> MaskedLM:
        """The same masking at a fixed rate and split (15%, 80/10/10), whatever this one
        trains with, so that runs with different masking are scored alike."""
        return MaskedLM(self.special, rate=EVAL_MASK_RATE, whole_word=self.whole_word,
                        word_start_table=self.word_start_table, next_token=self.next_token,
                        head=self.head)

    def rate_at(self, step: int) -> float:
        return self.rate(step) if callable(self.rate) else self.rate

    def select(self, tokens: Tensor, generator: torch.Generator, step: int = 0) -> Tensor:
        """Boolean (B, T): the positions whose original token becomes a target."""
        special = self._special_table[tokens]
        eligible = ~special
        if self.next_token:
            eligible[:, 0] = False  # nothing before it to predict it from
        rate = self.rate_at(step)
        if self.whole_word:
            starts = masking.word_starts_from_table(tokens, self.word_start_table, special)
            return masking.select_whole_words(eligible, starts, rate, generator,
                                              exact=self.selection == "exact")
        if self.selection == "exact":
            return masking.select_exact(eligible, rate, generator)
        return masking.select_bernoulli(eligible, rate, generator)

    def corrupt(self, tokens: Tensor, generator: torch.Generator,
                step: int = 0) -> tuple[Tensor, Tensor]:
        """(inputs, targets) for `tokens`; targets hold originals at selected positions."""
        selected = self.select(tokens, generator, step)
        inputs = masking.replace_selected(tokens, selected, self.special.mask,
                                          self._ordinary_ids, self.mask_prob,
                                          self.random_prob, generator)
        targets = torch.where(selected, tokens, IGNORE_INDEX)
        if self.next_token:
            targets = torch.cat((targets[:, 1:], torch.full_like(targets[:, :1], IGNORE_INDEX)), 1)
        return inputs, targets

    def make_batch(self, tokens: Tensor, generator: torch.Generator, step: int = 0) -> Batch:
        inputs, targets = self.corrupt(tokens, generator, step)
        segments, positions = document_layout(tokens, self.special)
        return Batch(
            input_ids=inputs,
            mask=MaskSpec("bidirectional", segment_ids=attention_segments(segments)),
            positions=positions, targets=targets,
            predict_at={self.head: Positions.where(targets != IGNORE_INDEX)},
        )
