"""How each kind of model scores a text, in the layout it was trained with.

A document is its token ids followed by [EOS], as in a prepared dataset (its ids alone when the
tokenizer has no [EOS]); positions start at 0 in every window, as they do for a piece of a
document cut from a training block. Framing tokens the tokenizer lacks are left out.

    causal  (clm) log p(token | the tokens before it), read at the position before it. A
            document's first token is given, not scored: training isolates documents and
            never predicts their first token. The closing [EOS] is scored instead, so a
            document of n tokens read in one window gets n predictions (with windows that
            do not overlap, each window's first token is given too).
    prefix  (prefix LM) as causal, but a window's context that earlier windows already
            scored is its bidirectional prefix, as in training; the first window's prefix is
            the document's first token.
    pseudo  (masked LM) pseudo-log-likelihood (Salazar et al. 2020): every ordinary
            token is replaced by [MASK] once and the log-probability of the original is read
            at its position, one masked copy per row. mlm+nsp models read `[CLS] text [SEP]`
            as in BERT. pseudo-next (mntp, masked next-token) reads the prediction one
            position earlier, so a document's first token is given.
    pseudo-span (T5 span corruption) the span-corruption analogue of pseudo-log-likelihood:
            every ordinary token becomes a one-token noise span once, the input
            `... <extra_id_0> ... [EOS]` is the bidirectional prefix, then `<extra_id_0>`
            begins the target and the token's log-probability is read after it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from torch import Tensor

from lmlab.data.special_tokens import SENTINELS, SpecialTokens
from lmlab.eval.windows import centred_windows, left_context_windows
from lmlab.model.masks import Kind
from lmlab.objectives.base import Objective
from lmlab.objectives.traits import Traits
from lmlab.tasks.framing import frame_tokens


@dataclass
class Chunk:
    """Rows for one forward pass and the log-probabilities to read from them."""

    ids: Tensor  # (R, L) token ids
    rows: Tensor  # (P,) the row each prediction is read from
    positions: Tensor  # (P,) its position in that row
    targets: Tensor  # (P,) the token whose log-probability is read there
    prefix_len: Tensor | None = None  # (R,) for prefix attention

    def split(self, max_rows: int) -> list[Chunk]:
        """Pieces of at most `max_rows` rows, each with its own predictions."""
        if len(self.ids) <= max_rows:
            return [self]
        pieces = []
        for first in range(0, len(self.ids), max_rows):
            last = first + max_rows
            keep = (self.rows >= first) & (self.rows < last)
            prefix = None if self.prefix_len is None else self.prefix_len[first:last]
            pieces.append(Chunk(self.ids[first:last], self.rows[keep] - first,
                                self.positions[keep], self.targets[keep], prefix))
        return pieces


class ScoringRule:
    """A way to turn a document into rows whose log-probabilities sum to its score."""

    name: str
    head: str = "lm"
    attention: Kind
    perplexity_name = "perplexity"
    description: str

    def __init__(self, special: SpecialTokens) -> None:
        self.special = special
        self._special_table = special.special_table()

    def document(self, ids: Tensor) -> Tensor:
        """A text as a packed training document: its ids and what frames them."""
        before, after = frame_tokens(self.special, "document")
        return torch.cat((torch.tensor(before, dtype=ids.dtype), ids,
                          torch.tensor(after, dtype=ids.dtype)))

    def window(self, context: int) -> int:
        """Document tokens per row for a model with `context` positions."""
        return context

    def chunks(self, document: Tensor, window: int, stride: int) -> Iterator[Chunk]:
        raise NotImplementedError

    def ordinary(self, piece: Tensor, at: Tensor) -> Tensor:
        """The positions `at` that hold ordinary tokens (training never masks special ones)."""
        return at[~self._special_table[piece[at]]]


class NextTokenScoring(ScoringRule):
    head = "lm"

    def __init__(self, special: SpecialTokens, prefix: bool = False) -> None:
        super().__init__(special)
        self.prefix = prefix
        self.name = "prefix" if prefix else "causal"
        self.attention = "prefix" if prefix else "causal"
        self.description = (
            "summed log p(token | tokens before it)"
            + (", already-scored context read as a bidirectional prefix" if prefix else "")
            + "; a document's first token is given"
            + (", its closing [EOS] is scored" if special.eos is not None else ""))

    def chunks(self, document: Tensor, window: int, stride: int) -> Iterator[Chunk]:
        for w in left_context_windows(len(document), window, stride):
            context = max(w.score_start - w.start, 1)  # a window's first token has no context
            scored = torch.arange(w.start + context, w.score_stop)
            if not len(scored):
                continue
            prefix_len = torch.tensor([context]) if self.prefix else None
            yield Chunk(document[w.start:w.stop][None], torch.zeros_like(scored),
                        scored - 1 - w.start, document[scored], prefix_len)

    def continuation(self, context: Tensor, continuation: Tensor, window: int) -> Chunk:
        """One row scoring `continuation` after `context` (token ids, no framing added), as
        lm-evaluation-harness reads a request: the row's last `window` inputs, the context's
        start dropped first; the context is the prefix of a prefix LM."""
        if not 1 <= len(continuation) <= window or not len(context):
            raise ValueError(f"a continuation of {len(continuation)} tokens after "
                             f"{len(context)} of context cannot be scored in a window of "
                             f"{window}: it needs 1 to {window} tokens and some context")
        row = torch.cat((context, continuation))[-(window + 1):-1]  # (≤ window,)
        scored = torch.arange(len(row) - len(continuation), len(row))
        prefix_len = torch.tensor([len(row) - len(continuation) + 1]) if self.prefix else None
        return Chunk(row[None], torch.zeros_like(scored), scored, continuation, prefix_len)


class MaskedScoring(ScoringRule):
    name = "pseudo"
    attention = "bidirectional"
    perplexity_name = "pseudo-perplexity"

    def __init__(self, special: SpecialTokens, head: str = "mlm", next_token: bool = False,
                 framed: bool = False) -> None:
        super().__init__(special)
        self.mask = special.require("mask", "pseudo-log-likelihood scoring")
        self.head, self.next_token, self.framed = head, next_token, framed
        # BERT's [CLS] text [SEP] around each window, as much of it as the tokenizer has
        self.before, self.after = frame_tokens(special, "pair") if framed else ([], [])
        self.name = "pseudo-next" if next_token else "pseudo"
        where = ("read one position earlier (masked next-token); a document's first token "
                 "is given" if next_token else "read at the mask")
        self.description = ("pseudo-log-likelihood: each ordinary token masked once, " + where
                            + ("; text framed as [CLS] text [SEP]" if framed else ""))

    def document(self, ids: Tensor) -> Tensor:
        return ids if self.framed else super().document(ids)

    def window(self, context: int) -> int:
        return context - len(self.before) - len(self.after)

    def chunks(self, document: Tensor, window: int, stride: int) -> Iterator[Chunk]:
        for w in centred_windows(len(document), window, stride):
            piece = document[w.start:w.stop]
            at = self.ordinary(piece, torch.arange(w.score_start, w.score_stop) - w.start)
            if self.next_token:
                at = at[at > 0]  # nothing before the window's first token to predict it
            if not len(at):
                continue
            rows = piece.repeat(len(at), 1)
            rows[torch.arange(len(at)), at] = self.mask
            read_at = (at - 1 if self.next_token else at) + len(self.before)
            rows = torch.cat((self._column(self.before, len(at)), rows,
                              self._column(self.after, len(at))), dim=1)
            yield Chunk(rows, torch.arange(len(at)), read_at, piece[at])

    @staticmethod
    def _column(ids: list[int], rows: int) -> Tensor:
        """(rows, len(ids)): `ids` repeated on every row."""
        return torch.tensor(ids, dtype=torch.long).expand(rows, len(ids))


class SpanScoring(ScoringRule):
    name = "pseudo-span"
    head = "lm"
    attention = "prefix"
    perplexity_name = "pseudo-perplexity"
    description = ("span pseudo-log-likelihood: each ordinary token once a one-token noise "
                   "span; read after the target's first sentinel")

    def __init__(self, special: SpecialTokens) -> None:
        super().__init__(special)
        special.require_all(("eos", SENTINELS), "span scoring")

    def window(self, context: int) -> int:
        return context - 2  # the input's [EOS] and the target's first sentinel

    def chunks(self, document: Tensor, window: int, stride: int) -> Iterator[Chunk]:
        sentinel = self.special.sentinels[0]
        for w in centred_windows(len(document), window, stride):
            piece = document[w.start:w.stop]
            at = self.ordinary(piece, torch.arange(w.score_start, w.score_stop) - w.start)
            if not len(at):
                continue
            count, inputs = len(at), len(piece) + 1
            rows = piece.repeat(count, 1)
            rows[torch.arange(count), at] = sentinel
            rows = torch.cat((rows, torch.full((count, 1), self.special.eos),
                              torch.full((count, 1), sentinel)), dim=1)
            yield Chunk(rows, torch.arange(count), torch.full((count,), inputs), piece[at],
                        prefix_len=torch.full((count,), inputs))


# Each rule by the name an objective declares for itself (Traits.scoring).
RULES: dict[str, Callable[[SpecialTokens, Traits], ScoringRule]] = {
    "causal": lambda special, traits: NextTokenScoring(special),
    "prefix": lambda special, traits: NextTokenScoring(special, prefix=True),
    "pseudo": lambda special, traits: MaskedScoring(
        special, head=traits.fill_mask[0], framed=traits.framing == "pair"),
    "pseudo-next": lambda special, traits: MaskedScoring(
        special, head=traits.fill_mask[0], next_token=True, framed=traits.framing == "pair"),
    "pseudo-span": lambda special, traits: SpanScoring(special),
}


def rules_for(objective: Objective, special: SpecialTokens) -> list[ScoringRule]:
    """The scoring rules of a model trained with `objective`, one per kind, in the order of
    its parts."""
    rules: dict[str, ScoringRule] = {}
    for leaf in objective.leaves():
        rule = RULES[leaf.traits.scoring](special, leaf.traits)
        rules.setdefault(rule.name, rule)
    return list(rules.values())
