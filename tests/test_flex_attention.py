"""FlexAttention's block masks (the GPU route for policies that need a mask) give what SDPA
with the dense mask gives, for every policy, built from the same MaskSpec rule. FlexAttention
has no backward pass on CPU, so values are compared here; the model's route on a GPU is the
same call."""

import pytest
import torch

from lmlab import LanguageModel, SpecialTokens, preset
from lmlab.kernels import attention
from lmlab.kernels.attention import flex_attend, sdpa
from lmlab.model import MaskSpec
from lmlab.objectives.registry import build_objective

pytestmark = pytest.mark.filterwarnings("ignore:.*flex_attention.*:UserWarning")
BATCH, HEADS, HEAD_DIM = 2, 4, 16


def packed_segments(length: int, generator: torch.Generator) -> torch.Tensor:
    """Each row: documents of random lengths, then padding (segment 0)."""
    rows = []
    for _ in range(BATCH):
        ends = sorted(torch.randint(1, length - 3, (3,), generator=generator).tolist())
        row = torch.zeros(length, dtype=torch.long)
        start = 0
        for number, end in enumerate([*ends, length - 3], 1):
            row[start:end] = number
            start = end
        rows.append(row)
    return torch.stack(rows)


def policies(length: int, generator: torch.Generator) -> dict[str, MaskSpec]:
    segments = packed_segments(length, generator)
    prefix = torch.tensor([5, length // 2])
    return {"causal, packed": MaskSpec("causal", segment_ids=segments),
            "bidirectional, packed": MaskSpec("bidirectional", segment_ids=segments),
            "prefix": MaskSpec("prefix", prefix_len=prefix),
            "prefix, packed": MaskSpec("prefix", prefix_len=prefix, segment_ids=segments)}


@pytest.mark.parametrize("length", [37, 128, 200])
@pytest.mark.parametrize("kv_heads", [HEADS, 2])
def test_every_policy_matches_sdpa_with_the_dense_mask(length, kv_heads):
    generator = torch.Generator().manual_seed(length)
    q = torch.randn(BATCH, HEADS, length, HEAD_DIM, generator=generator)
    k, v = (torch.randn(BATCH, kv_heads, length, HEAD_DIM, generator=generator)
            for _ in range(2))
    for name, spec in policies(length, generator).items():
        expected = sdpa(q, k, v, *spec.sdpa_arguments(length, length), dropout_p=0.0)
        got = flex_attend(q, k, v, spec.block_mask(length, length))
        torch.testing.assert_close(got, expected, atol=2e-6, rtol=1e-5, msg=name)


def test_queries_after_a_cache_see_what_the_dense_mask_lets_them():
    generator = torch.Generator().manual_seed(1)
    spec = MaskSpec("causal")
    q = torch.randn(1, HEADS, 6, HEAD_DIM, generator=generator)  # the last 6 of 40 positions
    k, v = (torch.randn(1, HEADS, 40, HEAD_DIM, generator=generator) for _ in range(2))
    assert spec.needs_mask(6, 40)
    expected = sdpa(q, k, v, *spec.sdpa_arguments(6, 40), dropout_p=0.0)
    torch.testing.assert_close(flex_attend(q, k, v, spec.block_mask(6, 40)), expected,
                               atol=2e-6, rtol=1e-5)


def test_the_block_mask_is_the_dense_mask_block_by_block():
    spec = policies(128, torch.Generator().manual_seed(2))["prefix, packed"]
    dense = spec.allowed(128, 128)
    assert torch.equal(spec.block_mask(128, 128).to_dense().bool(),
                       dense.unflatten(1, (-1, 128)).unflatten(3, (-1, 128)).any(4).any(2)[:, None])


@pytest.mark.parametrize("objective", ["mlm", "span", "prefix", "clm"])
def test_a_model_gives_the_same_outputs_through_flex_attention(objective, monkeypatch):
    special = SpecialTokens.layout(300, n_sentinels=8)
    built = build_objective(objective, special)
    torch.manual_seed(0)
    model = LanguageModel(preset("gpt2-tiny", 300, 64), heads=built.heads).eval()
    generator = torch.Generator().manual_seed(3)
    tokens = torch.randint(20, 300, (2, 64), generator=generator)
    tokens[:, 20] = special.eos  # two documents a row
    batch = built.make_batch(tokens, generator)
    with torch.no_grad():
        expected = model(**batch.model_inputs())
        monkeypatch.setattr(attention, "FLEX_DEVICES", frozenset({"cpu"}))
        flex_calls = []
        monkeypatch.setattr(attention, "flex_attend",
                            lambda *args: flex_calls.append(args) or flex_attend(*args))
        got = model(**batch.model_inputs())
    assert len(flex_calls) == model.cfg.n_layers  # every layer took FlexAttention's route
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], atol=1e-5, rtol=1e-4, msg=name)
