"""The attention policy proven by perturbation: change an input, see which outputs move."""

import pytest
import torch
import torch.nn.functional as F

from lmlab.config.presets import preset
from lmlab.kernels.attention import attend, plain_attention
from lmlab.model import LanguageModel, MaskSpec
from lmlab.model.masks import positions_within_segments, segments_from_document_ends
from tests.conftest import assert_close_in_bf16, seeded

VOCAB, LENGTH = 50, 16
FAMILIES = ["bert", "gpt2", "modern"]


def model_for(family: str) -> LanguageModel:
    torch.manual_seed(0)
    cfg = preset(f"{family}-tiny", vocab_size=VOCAB, max_seq_len=64, dropout=0.0)
    return LanguageModel(cfg, heads=("lm",)).eval()


def hidden(model, ids, mask, positions=None) -> torch.Tensor:
    with torch.no_grad():
        out = model(ids, mask, positions=positions)["hidden"]
    assert torch.isfinite(out).all()
    return out


def perturbed(ids: torch.Tensor, row: int, col: int) -> torch.Tensor:
    changed = ids.clone()
    changed[row, col] = (changed[row, col] + 7) % VOCAB
    return changed


def ids_batch(rows: int = 3) -> torch.Tensor:
    return torch.randint(0, VOCAB, (rows, LENGTH), generator=seeded(1))


def close(a, b) -> bool:
    return torch.allclose(a, b, atol=1e-6, rtol=0)


@pytest.mark.parametrize("family", FAMILIES)
def test_causal_outputs_never_see_later_tokens(family):
    model, ids = model_for(family), ids_batch()
    base = hidden(model, ids, MaskSpec("causal"))
    for j in (1, 7, LENGTH - 1):
        moved = hidden(model, perturbed(ids, 0, j), MaskSpec("causal"))
        assert close(moved[0, :j], base[0, :j])
        assert not close(moved[0, j:], base[0, j:])  # the change is visible from j on
        assert close(moved[1:], base[1:])


@pytest.mark.parametrize("family", FAMILIES)
def test_prefix_outputs_ignore_the_suffix_and_see_all_of_the_prefix(family):
    model, ids = model_for(family), ids_batch()
    prefix_len = torch.tensor([5, 9, 1])
    mask = MaskSpec("prefix", prefix_len=prefix_len)
    base = hidden(model, ids, mask)
    for row, p in enumerate(prefix_len.tolist()):
        for j in range(p, LENGTH):  # a suffix token moves nothing before it
            moved = hidden(model, perturbed(ids, row, j), mask)
            assert close(moved[row, :j], base[row, :j])
        if p > 1:  # the last prefix token is seen by the first prefix position
            moved = hidden(model, perturbed(ids, row, p - 1), mask)
            assert not close(moved[row, 0], base[row, 0])


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("kind", ["bidirectional", "causal"])
def test_packed_documents_never_affect_each_other(family, kind):
    model = model_for(family)
    ids = ids_batch(1)
    ids[0, 5] = ids[0, 11] = 6  # two [EOS] close documents 1 and 2
    segments = segments_from_document_ends(ids, end_id=6, pad_id=-1)
    positions = positions_within_segments(segments)
    mask = MaskSpec(kind, segment_ids=segments)
    base = hidden(model, ids, mask, positions)
    for j in range(LENGTH):
        moved = hidden(model, perturbed(ids, 0, j), mask, positions)
        other_documents = segments[0] != segments[0, j]
        assert close(moved[0, other_documents], base[0, other_documents])
    # and each document alone gives exactly what it gives packed
    alone = hidden(model, ids[:, 6:12], MaskSpec(kind))
    assert torch.allclose(alone, base[:, 6:12], atol=1e-5)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("kind", ["bidirectional", "causal", "prefix"])
def test_padding_never_affects_real_tokens_and_gives_no_nan(family, kind):
    model, ids = model_for(family), ids_batch(2)
    segments = torch.ones_like(ids)
    segments[0, 10:] = 0  # right padding
    segments[1, :4] = 0  # left padding
    positions = positions_within_segments(segments)
    prefix = torch.tensor([6, 8]) if kind == "prefix" else None
    mask = MaskSpec(kind, prefix_len=prefix, segment_ids=segments)
    base = hidden(model, ids, mask, positions)
    for row, j in ((0, 12), (0, 15), (1, 0), (1, 3)):
        noise = perturbed(ids, row, j)
        moved = hidden(model, noise, mask, positions)
        assert close(moved[segments == 1], base[segments == 1])


def test_fast_paths_equal_explicit_masks():
    model, ids = model_for("modern"), ids_batch()
    causal = hidden(model, ids, MaskSpec("causal"))
    every_row_one_document = torch.ones_like(ids)
    explicit = hidden(model, ids, MaskSpec("causal", segment_ids=every_row_one_document))
    as_prefix = hidden(model, ids, MaskSpec("prefix", prefix_len=torch.zeros(3, dtype=torch.long)))
    torch.testing.assert_close(explicit, causal, atol=1e-6, rtol=0)
    torch.testing.assert_close(as_prefix, causal, atol=1e-6, rtol=0)
    full = hidden(model, ids, MaskSpec("bidirectional"))
    full_prefix = torch.full((3,), LENGTH)
    torch.testing.assert_close(hidden(model, ids, MaskSpec("prefix", prefix_len=full_prefix)),
                               full, atol=1e-6, rtol=0)
    assert MaskSpec("causal").sdpa_arguments(LENGTH, LENGTH) == (None, True)
    assert MaskSpec("bidirectional").sdpa_arguments(LENGTH, LENGTH) == (None, False)


def test_no_query_row_is_ever_fully_masked():
    segments = torch.tensor([[0, 0, 1, 1, 2, 0], [3, 3, 3, 0, 0, 0]])
    for kind, prefix in (("causal", None), ("bidirectional", None),
                         ("prefix", torch.tensor([0, 6]))):
        allowed = MaskSpec(kind, prefix, segments).allowed(6, 6)
        assert allowed.any(-1).all()
        for query_len in (1, 3):  # cached decoding: the newest queries
            assert MaskSpec(kind, prefix, segments).allowed(query_len, 6).any(-1).all()


@pytest.mark.parametrize("query_len", [16, 1, 5])  # whole block, one decoded token, a chunk
@pytest.mark.parametrize("kind", ["causal", "prefix", "bidirectional"])
def test_bf16_plain_attention_on_cpu_matches_bf16_sdpa(kind, query_len):
    torch.manual_seed(0)
    q = torch.randn(3, 2, query_len, 8)
    k, v = torch.randn(2, 3, 2, 16, 8)
    segments = torch.tensor([[1] * 16, [1] * 9 + [2] * 7, [1] * 12 + [0] * 4])
    prefix = torch.tensor([4, 10, 1]) if kind == "prefix" else None
    spec = MaskSpec(kind, prefix, segments if query_len > 1 else None)
    mask, causal = spec.sdpa_arguments(query_len, 16)
    half, reference = ([t.bfloat16().requires_grad_() for t in (q, k, v)] for _ in range(2))
    got = plain_attention(*half, mask, causal, 0.0)
    expected = F.scaled_dot_product_attention(*reference, attn_mask=mask, is_causal=causal)
    assert_close_in_bf16(got, expected)
    got.sum().backward()
    expected.sum().backward()
    for mine, theirs in zip(half, reference, strict=True):
        assert_close_in_bf16(mine.grad, theirs.grad)


def test_attend_takes_the_plain_path_for_short_sequences_in_cpu_training():
    torch.manual_seed(0)
    for length, plain_in in ((16, {torch.bfloat16, torch.float32}),
                                (200, {torch.bfloat16}), (300, set())):
        for dtype in (torch.bfloat16, torch.float32):
            for training in (True, False):
                q, k, v = torch.randn(3, 1, 2, length, 8, dtype=dtype).requires_grad_(training)
                sdpa = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                plain = plain_attention(q, k, v, None, True, 0.0)
                expected = plain if training and dtype in plain_in else sdpa
                assert torch.equal(attend(q, k, v, MaskSpec("causal"), 0.0), expected)


@pytest.mark.parametrize("query_len", [16, 1, 5])  # whole block, one decoded token, a chunk
@pytest.mark.parametrize("kind", ["causal", "prefix", "bidirectional"])
def test_fp32_plain_attention_equals_sdpa_with_gradients(kind, query_len):
    torch.manual_seed(0)
    q = torch.randn(3, 2, query_len, 8, requires_grad=True)
    k, v = (t.requires_grad_() for t in torch.randn(2, 3, 2, 16, 8))
    segments = torch.tensor([[1] * 16, [1] * 9 + [2] * 7, [1] * 12 + [0] * 4])
    prefix = torch.tensor([4, 10, 1]) if kind == "prefix" else None
    mask, causal = MaskSpec(kind, prefix, segments if query_len > 1 else None).sdpa_arguments(
        query_len, 16)
    got = plain_attention(q, k, v, mask, causal, 0.0)
    grads = torch.autograd.grad(got.square().sum(), (q, k, v))
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
    expected_grads = torch.autograd.grad(expected.square().sum(), (q, k, v))
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=1e-5)
    for mine, reference in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(mine, reference, atol=1e-5, rtol=1e-5)
