"""What a head reads of the backbone's hidden states (B, T, d), said by the selector's type, so
that a batch can be cut into micro-batches, stacked with others and moved to a device without
asking which head a selector is for:

    Positions(flat)   tokens, as flat indices into B·T (MLM's masked positions)
    Rows(index)       rows, each read at its first position (NSP on some rows)
    Pooling(weights)  (B, T) weights of each row's positions in its pooled vector
    None              everything: every position of a token head, every row's first
                      position of a sequence head

Each head declares the selectors it accepts (lmlab.model.heads).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields

import torch
from torch import Tensor

from lmlab.kernels.linear_cross_entropy import IGNORE_INDEX


class Selector:
    """One tensor saying what a head reads; subclasses are frozen dataclasses of that tensor."""

    @property
    def tensor(self) -> Tensor:
        return getattr(self, fields(self)[0].name)

    def map(self, fn: Callable[[Tensor], Tensor]) -> Selector:
        """The selector with `fn` applied to its tensor (e.g. a copy to a device)."""
        return type(self)(fn(self.tensor))

    def rows(self, start: int, stop: int, length: int) -> Selector:
        """What it reads of rows [start, stop) of its (B, `length`) batch, in that sub-batch."""
        raise NotImplementedError

    def shifted(self, rows: int, length: int) -> Selector:
        """What it reads once `rows` rows of `length` positions are stacked before its own."""
        raise NotImplementedError

    @classmethod
    def every(cls, rows: int, length: int) -> Selector:
        """What None means for this kind of selector, in a (rows, length) batch."""
        raise NotImplementedError

    def read(self, hidden: Tensor) -> Tensor:
        """The hidden states it selects of (B, T, d) `hidden`."""
        raise NotImplementedError


def _within(index: Tensor, first: int, last: int) -> Tensor:
    """The entries of `index` in [first, last), counted from `first`."""
    return index[(index >= first) & (index < last)] - first


@dataclass(frozen=True)
class Positions(Selector):
    """The tokens a token head reads, as flat indices into B·T (N,), in order; padded to a
    fixed N for a compiled step (`padded`), with -1 entries at the end."""

    flat: Tensor

    @classmethod
    def where(cls, chosen: Tensor) -> Positions:
        """The True entries of a (B, T) boolean tensor."""
        return cls(chosen.reshape(-1).nonzero().squeeze(1))

    @classmethod
    def nowhere(cls) -> Positions:
        return cls(torch.empty(0, dtype=torch.long))

    @classmethod
    def every(cls, rows: int, length: int) -> Positions:
        return cls(torch.arange(rows * length))

    def rows(self, start: int, stop: int, length: int) -> Positions:
        return self.map(lambda flat: _within(flat, start * length, stop * length))

    def shifted(self, rows: int, length: int) -> Positions:
        return self.map(lambda flat: torch.where(flat >= 0, flat + rows * length, flat))

    def padded(self, size: int) -> Positions:
        """The same positions followed by -1 entries up to `size` (unchanged when it holds
        that many already): a compiled step sees one shape whatever the count (cramming's
        exact-count masking, by padding instead)."""
        missing = size - self.flat.shape[0]
        if missing <= 0:
            return self
        return Positions(torch.cat([self.flat, self.flat.new_full((missing,), -1)]))

    def read(self, hidden: Tensor) -> Tensor:
        """(B, T, ...) → (N, ...): also picks a (B, T) tensor of targets. A padding entry
        reads IGNORE_INDEX from an integer tensor (targets), and the last position from any
        other (computed, never scored)."""
        picked = hidden.flatten(0, 1)[self.flat]
        if hidden.is_floating_point():
            return picked
        padding = ~self.real().view(-1, *(1,) * (picked.ndim - 1))
        return picked.masked_fill(padding, IGNORE_INDEX)

    def real(self) -> Tensor:
        """(N,) True at the entries that name a position, False at padding."""
        return self.flat >= 0

    def write(self, values: Tensor, into: Tensor) -> Tensor:
        """(B, T) `into` with `values` (N,) at these positions. A padding entry writes to a
        slot past the end, dropped after: it changes nothing."""
        flat = into.flatten()
        end = flat.numel()
        index = torch.where(self.real(), self.flat, end)
        return torch.cat([flat, flat[:1]]).index_put((index,), values)[:end].view_as(into)


@dataclass(frozen=True)
class Rows(Selector):
    """The rows a sequence head reads, each at its first position, as row indices (N,)."""

    index: Tensor

    @classmethod
    def nowhere(cls) -> Rows:
        return cls(torch.empty(0, dtype=torch.long))

    @classmethod
    def every(cls, rows: int, length: int) -> Rows:
        return cls(torch.arange(rows))

    def rows(self, start: int, stop: int, length: int) -> Rows:
        return self.map(lambda index: _within(index, start, stop))

    def shifted(self, rows: int, length: int) -> Rows:
        return self.map(lambda index: index + rows)

    def read(self, hidden: Tensor) -> Tensor:
        return hidden[self.index, 0]  # (N, d)


@dataclass(frozen=True)
class Pooling(Selector):
    """Per-row pooling weights (B, T), each row's summing to 1: one-hot at [CLS] or at the last
    token, or uniform over the text for mean pooling."""

    weights: Tensor

    @classmethod
    def every(cls, rows: int, length: int) -> Pooling:
        weights = torch.zeros(rows, length)
        weights[:, 0] = 1.0
        return cls(weights)

    def rows(self, start: int, stop: int, length: int) -> Pooling:
        return self.map(lambda weights: weights[start:stop])

    def shifted(self, rows: int, length: int) -> Pooling:
        return self  # its rows are its batch's own: stacking batches stacks the weights

    def read(self, hidden: Tensor) -> Tensor:
        return (self.weights.unsqueeze(-1).to(hidden.dtype) * hidden).sum(dim=1)  # (B, d)


def stacked(selectors: Sequence[Selector]) -> Selector:
    """One selector of the same kind reading what each of `selectors` reads, already shifted
    to the rows of their batches stacked in order."""
    kinds = {type(s) for s in selectors}
    if len(kinds) != 1:
        raise ValueError(f"cannot stack selectors of different kinds: "
                         f"{', '.join(sorted(k.__name__ for k in kinds))}")
    return selectors[0].map(lambda _: torch.cat([s.tensor for s in selectors]))


def describe(accepted: Sequence[type]) -> str:
    """The names of the selector types `accepted`, None as None."""
    return ", ".join("None" if kind is type(None) else kind.__name__ for kind in accepted)
