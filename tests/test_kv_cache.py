"""Incremental decoding with the KV cache equals a full forward at every step."""

import pytest
import torch

from lmlab.model import KVCache, MaskSpec
from lmlab.model.masks import positions_within_segments
from tests.test_attention_policy import FAMILIES, VOCAB, model_for

STEPS = 6


def decode_and_compare(model, ids, prompt_len, mask_for, segments=None):
    """Prefill `prompt_len` tokens, then feed the rest one at a time; compare each step's
    logits with a full forward over the same tokens."""
    batch, total = ids.shape
    segments = segments if segments is not None else torch.ones_like(ids)
    positions = positions_within_segments(segments)
    cache = KVCache(model.cfg, batch, total)
    with torch.no_grad():
        for end in range(prompt_len, total + 1):
            start = 0 if end == prompt_len else end - 1
            step = model(ids[:, start:end], mask_for(segments[:, :end]),
                         positions=positions[:, start:end], cache=cache)["lm"]
            full = model(ids[:, :end], mask_for(segments[:, :end]),
                         positions=positions[:, :end])["lm"]
            real = segments[:, start:end] > 0
            torch.testing.assert_close(step[real], full[:, start:end][real],
                                       atol=2e-5, rtol=1e-5)
    assert cache.length == total


@pytest.mark.parametrize("family", FAMILIES)
def test_causal_decoding_with_cache_equals_full_forward(family):
    model = model_for(family)
    ids = torch.randint(0, VOCAB, (2, 5 + STEPS), generator=torch.Generator().manual_seed(0))
    decode_and_compare(model, ids, prompt_len=5, mask_for=lambda seg: MaskSpec("causal"))


@pytest.mark.parametrize("family", FAMILIES)
def test_prefix_prefill_then_decoding_equals_full_forward(family):
    model = model_for(family)
    ids = torch.randint(0, VOCAB, (2, 7 + STEPS), generator=torch.Generator().manual_seed(1))
    prefix = torch.tensor([7, 7])
    decode_and_compare(model, ids, prompt_len=7,
                       mask_for=lambda seg: MaskSpec("prefix", prefix_len=prefix))


@pytest.mark.parametrize("family", FAMILIES)
def test_left_padded_batch_decoding_equals_full_forward(family):
    model = model_for(family)
    ids = torch.randint(0, VOCAB, (2, 6 + STEPS), generator=torch.Generator().manual_seed(2))
    segments = torch.ones_like(ids)
    segments[1, :3] = 0  # the shorter prompt is padded on the left
    decode_and_compare(model, ids, prompt_len=6, segments=segments,
                       mask_for=lambda seg: MaskSpec("causal", segment_ids=seg))


def test_cache_overflow_is_a_clear_error():
    model = model_for("gpt2")
    cache = KVCache(model.cfg, 1, 4)
    with pytest.raises(ValueError, match="KV cache full"):
        model(torch.zeros(1, 5, dtype=torch.long), MaskSpec("causal"), cache=cache)
