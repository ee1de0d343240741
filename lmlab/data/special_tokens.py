"""The vocabulary's special tokens by role, as ids: what objectives, tokenizers and fine-tuning
encoders agree on without sharing a tokenizer object."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

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
