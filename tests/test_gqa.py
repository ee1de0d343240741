"""Grouped-query attention and explicit head/feed-forward sizes: parity with Hugging Face's
Llama both ways, cached decoding, the bf16 attention path, and FLOPs that count what runs.

Two key/value heads serve two consecutive query heads each, as in HF's `repeat_kv`, so a
wrong grouping order shows; the head width (24) differs from d_model / n_heads (16), and
embeddings are untied, so a swapped or mis-split tensor changes the logits.
"""

import pytest
import torch
import torch.nn.functional as F

from lmlab.config.presets import preset
from lmlab.export import from_hf_state_dict, hf_config, to_hf_state_dict
from lmlab.kernels.attention import attend, plain_attention
from lmlab.model import KVCache, LanguageModel, MaskSpec
from lmlab.model.flops import flops_per_token
from tests.conftest import assert_close_in_bf16
from tests.test_hf_parity import (
    VOCAB,
    assert_same_outputs,
    hf_outputs,
    jitter,
    lmlab_outputs,
    transformers,
)
from tests.test_kv_cache import decode_and_compare

GQA = preset("modern-tiny", vocab_size=VOCAB, max_seq_len=32, n_heads=4, n_kv_heads=2,
             head_size=24, ffn_size=80, tie_embeddings=False, dropout=0.0)


def random_lmlab(seed: int = 1) -> LanguageModel:
    torch.manual_seed(0)
    return jitter(LanguageModel(GQA, ("lm",)), seed)


def random_llama(seed: int = 2) -> torch.nn.Module:
    torch.manual_seed(0)
    return jitter(transformers.LlamaForCausalLM(hf_config(GQA, "modern")), seed)


def test_projections_and_cache_hold_only_the_key_value_heads():
    attention = random_lmlab().backbone.blocks[0].attn
    assert attention.qkv.weight.shape == ((4 + 2 * 2) * 24, 64)
    assert attention.out.weight.shape == (64, 4 * 24)
    assert KVCache(GQA, batch_size=2, max_len=10).keys.shape == (GQA.n_layers, 2, 2, 10, 24)


def test_export_matches_llama_outputs():
    ours = random_lmlab()
    theirs = transformers.LlamaForCausalLM(hf_config(GQA, "modern")).eval()
    theirs.load_state_dict(to_hf_state_dict(ours, "modern"), strict=True)
    assert theirs.model.layers[0].self_attn.k_proj.weight.shape == (2 * 24, 64)
    assert_same_outputs(lmlab_outputs(ours, "modern"), hf_outputs(theirs, "modern"))


def test_import_matches_llama_outputs():
    theirs = random_llama()
    ours = from_hf_state_dict(theirs.state_dict(), GQA, "modern").eval()
    assert ours.heads["lm"].decoder.weight is not ours.backbone.token_embedding.weight
    assert_same_outputs(lmlab_outputs(ours, "modern"), hf_outputs(theirs, "modern"))


def test_round_trip_is_exact():
    ours = random_lmlab()
    back = from_hf_state_dict(to_hf_state_dict(ours, "modern"), GQA, "modern")
    for key, tensor in ours.state_dict().items():
        assert torch.equal(back.state_dict()[key], tensor), key


@pytest.mark.parametrize("padded", [False, True])
def test_cached_decoding_equals_full_forward(padded):
    model = random_lmlab()
    ids = torch.randint(0, VOCAB, (2, 12), generator=torch.Generator().manual_seed(0))
    segments = torch.ones_like(ids)
    segments[1, :3] = 0 if padded else 1  # left padding needs an explicit mask
    decode_and_compare(model, ids, prompt_len=6, segments=segments,
                       mask_for=lambda seg: MaskSpec("causal", segment_ids=seg))


def repeated_heads_reference(q, k, v, mask, causal) -> torch.Tensor:
    """Plain multi-head attention after giving each query head its key/value head."""
    group_size = q.shape[1] // k.shape[1]
    k, v = (t.repeat_interleave(group_size, dim=1) for t in (k, v))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)


@pytest.mark.parametrize("query_len", [16, 1, 5])  # whole block, one decoded token, a chunk
@pytest.mark.parametrize("kind", ["causal", "prefix"])
def test_attention_paths_group_query_heads_alike(kind, query_len):
    torch.manual_seed(0)
    q = torch.randn(3, 4, query_len, 8)
    k, v = torch.randn(2, 3, 2, 16, 8)
    segments = torch.tensor([[1] * 16, [1] * 9 + [2] * 7, [1] * 12 + [0] * 4])
    prefix = torch.tensor([4, 10, 1]) if kind == "prefix" else None
    spec = MaskSpec(kind, prefix, segments if query_len > 1 else None)
    mask, causal = spec.sdpa_arguments(query_len, 16)
    torch.testing.assert_close(attend(q, k, v, spec, 0.0),
                               repeated_heads_reference(q, k, v, mask, causal), atol=1e-6, rtol=0)
    half, reference = ([t.bfloat16().requires_grad_() for t in (q, k, v)] for _ in range(2))
    got = plain_attention(*half, mask, causal, 0.0)
    expected = repeated_heads_reference(*reference, mask, causal)
    assert_close_in_bf16(got, expected)
    got.sum().backward()
    expected.sum().backward()
    for mine, theirs in zip(half, reference, strict=True):
        assert_close_in_bf16(mine.grad, theirs.grad)


def test_flops_count_the_weights_that_run():
    model, seq_len = random_lmlab(), 32
    block = model.backbone.blocks[0]
    matmul_weights = sum(m.weight.numel() for m in (block.attn.qkv, block.attn.out,
                                                    block.mlp.up, block.mlp.down))
    scores_and_values = 12 * GQA.n_heads * GQA.head_dim * seq_len
    vocabulary = 6 * GQA.d_model * VOCAB
    expected = GQA.n_layers * (6 * matmul_weights + scores_and_values) + vocabulary
    assert flops_per_token(GQA, seq_len) == expected
