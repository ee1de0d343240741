"""What every objective shares: special-token ids, the Batch it makes, the LossSum it returns.

An objective is pure: `make_batch(tokens, generator, step)` turns a (B, T) block of token ids
into a Batch using only the ids, the special-token ids and the given torch.Generator;
`loss(outputs, batch)` turns model outputs into summed losses with their target counts. The
training loop divides each sum by its count gathered over micro-batches and ranks, so gradient
accumulation and data parallelism give the gradient of one big batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch
import torch.nn.functional as F
from torch import Tensor

from lmlab.model.heads import Unprojected, selects_rows
from lmlab.model.linear_cross_entropy import IGNORE_INDEX
from lmlab.model.masks import MaskSpec
from lmlab.objectives.traits import Traits

# The roles a special token can play. A tokenizer may lack some (BERT's has no [BOS] or [EOS],
# GPT-2's no [PAD] or [MASK]) and give one token several (GPT-2's <|endoftext|> is its bos, eos
# and unk).
ROLES = ("pad", "unk", "cls", "sep", "mask", "bos", "eos")
# What an objective may need besides roles: at least one sentinel <extra_id_N>.
SENTINELS = "sentinels"


@dataclass(frozen=True)
class SpecialTokens:
    """Ids of the special tokens and the vocabulary size; no tokenizer object needed. A role
    is None when the tokenizer has no such token; roles may share one id."""

    vocab_size: int
    pad: int | None = None
    unk: int | None = None
    cls: int | None = None
    sep: int | None = None
    mask: int | None = None
    bos: int | None = None
    eos: int | None = None
    sentinels: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        ids = self.all_ids
        sentinels = set(self.sentinels)
        if len(sentinels) != len(self.sentinels) or sentinels & set(self.present(*ROLES)):
            raise ValueError("sentinel ids must be distinct from each other and from the "
                             "special tokens")
        if ids and (min(ids) < 0 or max(ids) >= self.vocab_size):
            raise ValueError(f"special token ids must lie in [0, {self.vocab_size})")
        if len(ids) >= self.vocab_size:
            raise ValueError(f"a vocabulary of {self.vocab_size} leaves no room for ordinary "
                             f"tokens beside {len(ids)} special ones")

    @property
    def all_ids(self) -> tuple[int, ...]:
        """The distinct special ids, roles first, then sentinels."""
        return tuple(dict.fromkeys(self.present(*ROLES))) + self.sentinels

    def present(self, *roles: str) -> list[int]:
        """The ids of those of `roles` the tokenizer has, in order: `present("cls")` is
        [cls] or []."""
        return [token for token in map(self._id_of, roles) if token is not None]

    def require(self, role: str, needed_by: str) -> int:
        """The id of `role`; a one-line ValueError saying `needed_by` needs it when absent."""
        token = self._id_of(role)
        if token is None:
            raise ValueError(f"the tokenizer has no {role} token, which {needed_by} needs")
        return token

    def require_distinct(self, role: str, needed_by: str) -> int:
        """The id of `role`, which no other role may share: for a token told apart from the
        others by its value alone, as padding is in training blocks."""
        token = self.require(role, needed_by)
        sharing = [other for other in ROLES if other != role and self._id_of(other) == token]
        if sharing:
            raise ValueError(f"the tokenizer's {role} token is also its {sharing[0]} token, but "
                             f"{needed_by} needs a {role} token of its own")
        return token

    def require_all(self, needs: tuple[str, ...], needed_by: str) -> None:
        """A one-line ValueError for the first of `needs` (roles, or SENTINELS) missing."""
        for need in needs:
            if need != SENTINELS:
                self.require(need, needed_by)
            elif not self.sentinels:
                raise ValueError(f"{needed_by} needs sentinel tokens <extra_id_0>…, which this "
                                 "tokenizer lacks")

    @property
    def padding_id(self) -> int:
        """The id to fill rows with where lengths or segment ids mark the padding apart, so
        that the model never reads it as a token: [PAD] when there is one, else [EOS] (what
        GPT-2 users pad with), else 0, which every vocabulary has."""
        return (self.present("pad", "eos") or [0])[0]

    def _id_of(self, role: str) -> int | None:
        if role not in ROLES:
            raise ValueError(f"unknown special-token role {role!r}; roles are "
                             f"{', '.join(ROLES)}")
        return getattr(self, role)

    def special_table(self, device=None) -> Tensor:
        """Boolean (vocab_size,) table: True for special ids."""
        table = torch.zeros(self.vocab_size, dtype=torch.bool, device=device)
        table[list(self.all_ids)] = True
        return table

    def ordinary_ids(self) -> Tensor:
        """All non-special ids, ascending: what random replacement may draw from."""
        return (~self.special_table()).nonzero().squeeze(1)

    @classmethod
    def layout(cls, vocab_size: int, n_sentinels: int = 0) -> SpecialTokens:
        """The layout lmlab tokenizers use: specials first, then sentinels, then the rest."""
        sentinels = tuple(range(7, 7 + n_sentinels))
        return cls(vocab_size, pad=0, unk=1, cls=2, sep=3, mask=4, bos=5, eos=6,
                   sentinels=sentinels)


@dataclass
class Batch:
    """Model inputs, attention policy and targets for one micro-batch.

    `predict_at` maps each head to flat positions (indices into B·T; rows for a sequence head)
    must produce logits, or None for every position. `targets` holds the target id at each
    position, IGNORE_INDEX elsewhere.
    """

    input_ids: Tensor  # (B, T)
    mask: MaskSpec
    positions: Tensor  # (B, T)
    targets: Tensor  # (B, T)
    predict_at: dict[str, Tensor | None]
    token_type_ids: Tensor | None = None
    extras: dict[str, Tensor] = field(default_factory=dict)
    # What the host decides by (which objective made the batch): kept off the device, so
    # reading it never waits for one.
    host_facts: dict[str, int] = field(default_factory=dict)

    def model_inputs(self) -> dict:
        return dict(input_ids=self.input_ids, mask=self.mask, positions=self.positions,
                    token_type_ids=self.token_type_ids, predict_at=self.predict_at)

    def rows(self, start: int, stop: int) -> Batch:
        """The sub-batch of rows [start, stop), e.g. one micro-batch of a larger batch."""
        length = self.input_ids.shape[1]
        cut = lambda t: None if t is None else t[start:stop]  # noqa: E731
        predict_at = {}
        for head, at in self.predict_at.items():
            if at is not None and at.ndim == 2:  # per-row weights
                at = at[start:stop]
            elif at is not None:
                first, last = (start, stop) if selects_rows(head) else (start * length,
                                                                      stop * length)
                at = at[(at >= first) & (at < last)] - first
            predict_at[head] = at
        return Batch(
            input_ids=cut(self.input_ids), mask=self.mask.rows(start, stop),
            positions=cut(self.positions), targets=cut(self.targets), predict_at=predict_at,
            token_type_ids=cut(self.token_type_ids),
            extras={k: cut(v) if v.ndim else v for k, v in self.extras.items()},
            host_facts=self.host_facts,
        )

    def token_count(self) -> int:
        """Tokens in the batch, padding left out."""
        segments = self.mask.segment_ids
        return int((segments > 0).sum()) if segments is not None else self.input_ids.numel()

    def to(self, device: torch.device | str) -> Batch:
        """The batch on `device`, copied without waiting (`to_device`)."""
        def move(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else to_device(t, device)

        return replace(
            self, input_ids=move(self.input_ids), mask=self.mask.to(device, move),
            positions=move(self.positions), targets=move(self.targets),
            token_type_ids=move(self.token_type_ids),
            predict_at={k: move(v) for k, v in self.predict_at.items()},
            extras={k: move(v) for k, v in self.extras.items()},
        )


def to_device(tensor: Tensor, device: torch.device | str) -> Tensor:
    """`tensor` on `device`. Copies to a GPU start from pinned host memory and do not wait,
    so the host goes on queueing the step while they run (a plain copy from pageable memory
    would wait for the GPU's queue to drain first)."""
    if torch.device(device).type == "cuda" and tensor.device.type == "cpu":
        tensor = tensor.pin_memory()
    return tensor.to(device, non_blocking=True)


@dataclass
class LossSum:
    """Summed losses with their target counts, one term per quantity ("mlm", "nsp", ...).

    The objective's loss is the sum over terms of term_sum / term_count, each count taken over
    all micro-batches and ranks of a step.
    """

    terms: dict[str, tuple[Tensor, Tensor]]
    details: dict[str, tuple[Tensor, Tensor]] = field(default_factory=dict)  # reported only

    def mean(self, counts: dict[str, Tensor] | None = None) -> Tensor:
        """Σ sum/count; pass `counts` to normalise by global counts instead of local ones."""
        total = 0.0
        for name, (loss_sum, count) in self.terms.items():
            denominator = counts[name] if counts is not None else count
            total = total + loss_sum / denominator.clamp(min=1)
        return total


def cross_entropy(output: Tensor | Unprojected, targets: Tensor) -> tuple[Tensor, Tensor]:
    """(summed loss, per-row losses) of a vocabulary head's output against flat `targets`,
    IGNORE_INDEX rows counting 0. Only the sum is sure to carry a gradient: an Unprojected
    output is scored by the fused projection + cross-entropy."""
    if isinstance(output, Unprojected):
        return output.cross_entropy(targets)
    logits = output.reshape(-1, output.shape[-1]).float()
    losses = F.cross_entropy(logits, targets, ignore_index=IGNORE_INDEX, reduction="none")
    return losses.sum(), losses


def empty_sum(output: Tensor | Unprojected) -> Tensor:
    """The sum of a head's output on no position: zero, but joined to every weight the head
    would use."""
    if isinstance(output, Unprojected):
        return cross_entropy(output, torch.empty(0, dtype=torch.long,
                                                 device=output.features.device))[0]
    return output.sum()


def token_loss_sum(output: Tensor | Unprojected, targets: Tensor,
                   at: Tensor | None) -> tuple[Tensor, Tensor]:
    """Summed cross-entropy of a head's output against `targets` (B, T) at flat positions
    `at`, and the number of targets."""
    flat_targets = targets.reshape(-1) if at is None else targets.reshape(-1)[at]
    return cross_entropy(output, flat_targets)[0], (flat_targets != IGNORE_INDEX).sum()


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

    @property
    def heads(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(h for leaf in self.leaves() for h in leaf.traits.heads))

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
        runs a vocabulary projection, for FLOP counting (lmlab.train.throughput): the fused
        projection and cross-entropy skip positions without a target, so it is the share that
        carries one. Each objective counts its own."""
        raise NotImplementedError

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


def next_token_targets(tokens: Tensor, segment_ids: Tensor) -> Tensor:
    """targets[i] = tokens[i+1] where i+1 lies in the same (non-padding) document."""
    targets = torch.full_like(tokens, IGNORE_INDEX)
    same_document = (segment_ids[:, 1:] == segment_ids[:, :-1]) & (segment_ids[:, 1:] > 0)
    targets[:, :-1] = torch.where(same_document, tokens[:, 1:], IGNORE_INDEX)
    return targets


def flat_positions(where: Tensor) -> Tensor:
    """Flat indices into B·T of the True entries of a (B, T) boolean tensor."""
    return where.reshape(-1).nonzero().squeeze(1)
