"""When one token head reads chosen positions (MLM), the last block computes its output there
only; logits and every gradient equal the full model's at those positions, and the rows it
computed come back under "hidden_rows" instead of "hidden"."""

import pytest
import torch

from lmlab import LanguageModel, preset
from lmlab.model.masks import MaskSpec
from lmlab.model.selectors import Positions, Rows

VOCAB, LENGTH = 120, 24


def two_documents_and_padding() -> MaskSpec:
    segments = torch.ones(3, LENGTH, dtype=torch.long)
    segments[0, 10:] = 2
    segments[1, 20:] = 0
    return MaskSpec("bidirectional", segment_ids=segments)


def logits_and_gradients(model, ids, mask, at, sparse: bool):
    model.zero_grad()
    head = next(iter(model.heads))
    if sparse:
        outputs = model(ids, mask, predict_at={head: Positions(at)})
        logits, hidden = outputs[head], outputs.pop("hidden_rows")
    else:
        outputs = model(ids, mask, predict_at={head: None})
        logits, hidden = outputs[head].reshape(-1, VOCAB)[at], outputs.pop("hidden")
    assert set(outputs) == {head}
    weights = torch.randn(logits.shape, generator=torch.Generator().manual_seed(3))
    (logits * weights).sum().backward()
    return hidden.shape, logits.detach(), {
        name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("family, head", [("bert", "mlm"), ("gpt2", "lm"), ("modern", "lm")])
@pytest.mark.parametrize("recompute", [False, True])
@pytest.mark.parametrize("switches", [{}, dict(unet_skips=True, value_embeddings=1,
                                                  bigram_hash=64)])
def test_the_last_block_at_chosen_rows_equals_the_full_model(family, head, recompute, switches):
    torch.manual_seed(0)
    model = LanguageModel(preset(f"{family}-tiny", VOCAB, LENGTH, dropout=0.0, **switches),
                          heads=(head,))
    model.backbone.checkpoint_blocks = recompute
    ids = torch.randint(10, VOCAB, (3, LENGTH))
    at = torch.tensor([0, 5, 11, 23, 30, 47, 50, 71])  # across rows and documents
    mask = two_documents_and_padding() if family == "bert" else MaskSpec("causal")
    full_shape, full, full_gradients = logits_and_gradients(model, ids, mask, at, sparse=False)
    sparse_shape, sparse, gradients = logits_and_gradients(model, ids, mask, at, sparse=True)
    assert full_shape == (3, LENGTH, 64) and sparse_shape == (len(at), 64)
    torch.testing.assert_close(sparse, full, rtol=1e-5, atol=1e-5)
    assert gradients.keys() == full_gradients.keys()
    for name, gradient in full_gradients.items():
        torch.testing.assert_close(gradients[name], gradient, rtol=1e-4, atol=1e-6, msg=name)


def test_several_heads_or_every_position_keep_the_full_hidden_states():
    model = LanguageModel(preset("bert-tiny", VOCAB, LENGTH), heads=("mlm", "nsp"))
    ids, mask = torch.randint(10, VOCAB, (3, LENGTH)), MaskSpec("bidirectional")
    at, rows = Positions(torch.tensor([1, 2])), Rows(torch.tensor([0, 2]))
    for predict_at in ({"mlm": at, "nsp": None}, {"mlm": None}, {"nsp": rows}):
        outputs = model(ids, mask, predict_at=predict_at)
        assert outputs["hidden"].shape == (3, LENGTH, 64) and "hidden_rows" not in outputs
