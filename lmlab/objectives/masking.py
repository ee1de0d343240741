"""Pure samplers for masked-LM corruption: which positions to select, and what to put there.

Every function takes boolean (B, T) tensors and a torch.Generator; none knows a tokenizer.
"""

from __future__ import annotations

import torch
from torch import Tensor


def expand_from_word_starts(values: Tensor, word_starts: Tensor) -> Tensor:
    """Copy each word's first-token value to all of the word's tokens."""
    batch, length = word_starts.shape
    index = torch.arange(length, device=word_starts.device).expand(batch, length)
    start_index = torch.where(word_starts, index, torch.zeros_like(index))
    return values.gather(1, torch.cummax(start_index, dim=1).values)


def word_starts_from_table(tokens: Tensor, word_start_table: Tensor, special: Tensor) -> Tensor:
    """A token starts a word if its vocabulary entry says so (e.g. no `##`, or a leading
    space marker), if it is special, if it follows a special token, or if it opens the row."""
    starts = word_start_table[tokens] | special
    starts[:, 0] = True
    starts[:, 1:] |= special[:, :-1]
    return starts


def selection_budget(eligible: Tensor, rate: float) -> Tensor:
    """round(rate × eligible) per row, as a (B,) tensor (Python's round-half-even)."""
    return torch.round(eligible.sum(1).double() * rate).long()


def select_bernoulli(eligible: Tensor, rate: float, generator: torch.Generator) -> Tensor:
    """Each eligible position independently with probability `rate` (BERT, HF collator)."""
    draws = torch.rand(eligible.shape, generator=generator)
    return eligible & (draws < rate)


def select_exact(eligible: Tensor, rate: float, generator: torch.Generator) -> Tensor:
    """Exactly round(rate × eligible) positions per row, uniformly (static shapes)."""
    scores = torch.rand(eligible.shape, generator=generator).masked_fill(~eligible, 2.0)
    ranks = scores.argsort(dim=1).argsort(dim=1)
    return ranks < selection_budget(eligible, rate)[:, None]


def select_whole_words(eligible: Tensor, word_starts: Tensor, rate: float,
                       generator: torch.Generator, exact: bool = False) -> Tensor:
    """Select whole words: a word's tokens are all selected or none are.

    Bernoulli mode selects each word with probability `rate`; exact mode takes words in
    random order while fewer than round(rate × eligible) tokens are selected.
    """
    draws = torch.rand(eligible.shape, generator=generator)
    word_draws = expand_from_word_starts(draws, word_starts)
    word_eligible = expand_from_word_starts(eligible, word_starts) & eligible
    if not exact:
        return word_eligible & (word_draws < rate)
    selected = torch.zeros_like(eligible)
    budgets = selection_budget(eligible, rate)
    for row in range(eligible.shape[0]):
        starts = (word_starts[row] & word_eligible[row]).nonzero().squeeze(1)
        ends = torch.cat((word_starts[row].nonzero().squeeze(1), torch.tensor([eligible.shape[1]])))
        lengths = ends[torch.searchsorted(ends, starts, right=True)] - starts
        order = draws[row, starts].argsort()
        before = torch.cumsum(lengths[order], 0) - lengths[order]
        for start, length in zip(starts[order][before < budgets[row]].tolist(),
                                 lengths[order][before < budgets[row]].tolist(), strict=True):
            selected[row, start:start + length] = True
    return selected & word_eligible


def replace_selected(tokens: Tensor, selected: Tensor, mask_id: int, ordinary_ids: Tensor,
                     mask_prob: float, random_prob: float, generator: torch.Generator) -> Tensor:
    """BERT's corruption of selected positions: [MASK] with `mask_prob`, a random ordinary
    token with `random_prob`, otherwise the original token is kept."""
    draws = torch.rand(tokens.shape, generator=generator)
    to_mask = selected & (draws < mask_prob)
    to_random = selected & (draws >= mask_prob) & (draws < mask_prob + random_prob)
    random_tokens = ordinary_ids[
        torch.randint(len(ordinary_ids), tokens.shape, generator=generator)
    ]
    corrupted = torch.where(to_mask, torch.full_like(tokens, mask_id), tokens)
    return torch.where(to_random, random_tokens, corrupted)
