"""Incremental decoding with a KV cache: prefill the prompts once, then one token per step.

Prompts of different lengths are padded on the left, so every row's newest token sits in the
same column; padding is its own segment (0), which no real token attends to, and positions
count from each row's first real token. A prompt may open with a bidirectional prefix
(prefix-LM and span-corruption models read their input that way in training); what follows
is causal. A cached step equals a full forward over the same tokens (tests/test_generate.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import torch
from torch import Tensor

from lmlab.infer.sampling import Sampling, next_tokens
from lmlab.model import KVCache, LanguageModel, MaskSpec
from lmlab.model.selectors import Positions
from lmlab.runs.reading import pad_left


def room_for_new_tokens(model: LanguageModel, prompt_len: int) -> int:
    """New tokens that fit after a prompt: the last one is never fed back, so it needs no
    position of its own."""
    return model.cfg.max_seq_len - prompt_len + 1


def _prefill_mask(lengths: Tensor, padded_len: int, prefix_lens: Sequence[int] | None,
                  segment_ids: Tensor | None, device) -> MaskSpec:
    """Causal over the left-padded prompts, or each row's prefix read bidirectionally."""
    if prefix_lens is None:
        return MaskSpec("causal", segment_ids=segment_ids)
    starts = padded_len - lengths  # each row's first real column
    prefix_len = (starts + torch.as_tensor(prefix_lens)).to(device)
    return MaskSpec("prefix", prefix_len=prefix_len, segment_ids=segment_ids)


def _next_logits(model: LanguageModel, ids: Tensor, mask: MaskSpec, positions: Tensor,
                 cache: KVCache) -> Tensor:
    """(B, V) logits for the token after each row of `ids` (B, T), whose keys and values join
    the cache. For a prompt the LM head, and the last block past attention, run at its last
    column only; a step's one column is every position (picking it out would only copy)."""
    batch, length = ids.shape
    last = (None if length == 1
            else Positions(torch.arange(1, batch + 1, device=ids.device) * length - 1))
    logits = model(ids, mask, positions=positions, cache=cache, predict_at={"lm": last})["lm"]
    return logits.view(batch, -1)


def _all_columns(segments: Tensor, positions: Tensor, lengths: Tensor, steps: int,
                 device) -> tuple[Tensor | None, Tensor]:
    """Segments (None when no prompt is padded) and positions (B, T + steps - 1) of every
    column, the generated ones included, made once."""
    batch, padded_len = segments.shape
    new_positions = lengths[:, None] + torch.arange(steps - 1)[None, :]  # (B, steps - 1)
    all_positions = torch.cat((positions, new_positions), dim=1).to(device)
    if not bool((segments == 0).any()):
        return None, all_positions
    all_segments = torch.ones(batch, padded_len + steps - 1, dtype=torch.long)
    all_segments[:, :padded_len] = segments
    return all_segments.to(device), all_positions


def _seen_tokens(ids: Tensor, sampling: Sampling, vocab_size: int) -> Tensor | None:
    """(B, V) whether each row holds each token, for the repetition penalty (None: none)."""
    if sampling.repetition_penalty == 1.0:
        return None
    seen = torch.zeros(len(ids), vocab_size, dtype=torch.bool, device=ids.device)
    seen.scatter_(1, ids, True)  # padding marks [PAD], which is never a good choice
    return seen


@torch.inference_mode()
def decode(model: LanguageModel, prompts: Sequence[Sequence[int]], sampling: Sampling,
           max_new_tokens: int, pad_id: int, prefix_lens: Sequence[int] | None = None,
           generator: torch.Generator | None = None,
           on_step: Callable[[Tensor, Tensor], None] | None = None) -> Iterator[Tensor]:
    """Yield the (B,) next tokens of all prompts, step by step; `on_step(logits, chosen)`
    sees each step's (B, V) logits beside its choice (to show the alternatives).

    `prefix_lens[b]` tokens at the start of prompt b are read bidirectionally (None: the
    prompts are causal). Stops after `max_new_tokens` steps or when the context is full;
    the caller may stop earlier by leaving the loop.
    """
    device = next(model.parameters()).device
    ids, segments, positions = pad_left(prompts, pad_id)
    batch, padded_len = ids.shape
    lengths = segments.sum(dim=1)
    steps = min(max_new_tokens, room_for_new_tokens(model, int(lengths.max())))
    if steps < 1:
        return
    all_segments, all_positions = _all_columns(segments, positions, lengths, steps, device)

    def segments_until(end: int) -> Tensor | None:
        return None if all_segments is None else all_segments[:, :end]

    prefill_mask = _prefill_mask(lengths, padded_len, prefix_lens,
                                 segments_until(padded_len), device)
    dtype = next(model.parameters()).dtype
    cache = KVCache(model.cfg, batch, padded_len + steps - 1, device, dtype)
    ids = ids.to(device)
    seen = _seen_tokens(ids, sampling, model.cfg.vocab_size)
    logits = _next_logits(model, ids, prefill_mask, all_positions[:, :padded_len], cache)
    step_mask = MaskSpec("causal")  # one new token may see every cached one
    for step in range(steps):
        chosen = next_tokens(logits, sampling, seen, generator)
        if on_step is not None:
            on_step(logits, chosen)
        yield chosen
        if step == steps - 1:
            return
        if seen is not None:
            seen[torch.arange(batch, device=device), chosen] = True
        column = padded_len + step
        if all_segments is not None:
            step_mask = MaskSpec("causal", segment_ids=segments_until(column + 1))
        logits = _next_logits(model, chosen[:, None], step_mask,
                              all_positions[:, column:column + 1], cache)
