"""Heads: the sparse vocabulary projection equals the dense one at the target positions."""

import pytest
import torch

from lmlab.config.presets import preset
from lmlab.model import LanguageModel, MaskSpec
from lmlab.objectives import IGNORE_INDEX, MaskedLM
from lmlab.objectives.losses import token_loss_sum
from tests.conftest import random_block, seeded


@pytest.mark.parametrize("head", ["mlm", "lm"])
def test_sparse_head_equals_dense_head_at_target_positions(special, head):
    torch.manual_seed(0)
    model = LanguageModel(preset("bert-tiny", special.vocab_size, 64, dropout=0.0),
                          heads=(head,)).eval()
    batch = MaskedLM(special, head=head).make_batch(random_block(special, 4, 32), seeded(1))
    inputs = batch.model_inputs()
    sparse = model(**inputs)[head]
    dense = model(**{**inputs, "predict_at": {head: None}})[head]
    at = batch.predict_at[head]
    assert sparse.shape == (len(at.flat), special.vocab_size) and len(at.flat) > 0
    torch.testing.assert_close(sparse, dense.reshape(-1, special.vocab_size)[at.flat],
                               atol=1e-6, rtol=1e-6)
    sparse_loss = token_loss_sum(sparse, batch.targets, at)
    dense_loss = token_loss_sum(dense, batch.targets, None)
    torch.testing.assert_close(sparse_loss[0], dense_loss[0])
    assert sparse_loss[1] == dense_loss[1] == int((batch.targets != IGNORE_INDEX).sum())


def test_tied_heads_share_the_embedding_matrix(special):
    model = LanguageModel(preset("gpt2-tiny", special.vocab_size, 64), heads=("lm", "mlm"))
    embedding = model.backbone.token_embedding.weight
    assert model.heads["lm"].decoder.weight is embedding
    assert model.heads["mlm"].decoder.weight is embedding
    untied = LanguageModel(preset("gpt2-tiny", special.vocab_size, 64, tie_embeddings=False))
    assert untied.heads["lm"].decoder.weight is not untied.backbone.token_embedding.weight


def test_nsp_head_reads_the_first_position(special):
    torch.manual_seed(0)
    model = LanguageModel(preset("bert-tiny", special.vocab_size, 64, dropout=0.0),
                          heads=("nsp",)).eval()
    ids = random_block(special, 2, 16)
    out = model(ids, MaskSpec("bidirectional"))
    assert out["nsp"].shape == (2, 2)
    expected = model.heads["nsp"].classifier(model.heads["nsp"].pooler(out["hidden"][:, 0]).tanh())
    torch.testing.assert_close(out["nsp"], expected)


def test_unknown_head_is_a_clear_error(special):
    with pytest.raises(ValueError, match="unknown head"):
        LanguageModel(preset("bert-tiny", special.vocab_size), heads=("qa-span",))
    model = LanguageModel(preset("bert-tiny", special.vocab_size), heads=("lm",))
    with pytest.raises(ValueError, match="no 'mlm' head"):
        model(random_block(special, 1, 8), MaskSpec("causal"), predict_at={"mlm": None})


def test_a_sequence_head_starts_from_the_next_sentence_pooler_and_others_start_fresh():
    from lmlab.model.heads import make_head

    cfg = preset("bert-tiny", vocab_size=64)
    nsp, classify, tag = (make_head(name, cfg) for name in ("nsp", "classify", "tag"))
    embedding = torch.nn.Embedding(64, cfg.d_model)
    classify.start_from({"nsp": nsp}, embedding)
    assert all(torch.equal(a, b) for a, b in zip(classify.pooler.state_dict().values(),
                                                 nsp.pooler.state_dict().values(), strict=True))
    assert not torch.equal(classify.classifier.weight[:2], nsp.classifier.weight)
    before = [p.clone() for p in tag.parameters()]
    tag.start_from({"nsp": nsp}, embedding)
    assert all(torch.equal(a, b) for a, b in zip(before, tag.parameters(), strict=True))


def test_a_new_vocabulary_head_starts_from_the_token_embeddings_and_says_so():
    from lmlab.model.heads import HEADS, make_head, pools

    cfg = preset("modernbert-tiny", vocab_size=64)  # untied
    embedding, head = torch.nn.Embedding(64, cfg.d_model), make_head("lm", cfg)
    head.start_from({}, embedding)
    assert torch.equal(head.decoder.weight, embedding.weight)
    assert HEADS["lm"].how_it_starts(cfg) == "decoder a copy of the token embeddings"
    assert HEADS["lm"].how_it_starts(preset("gpt2-tiny", 64)) == (
        "decoder tied to the token embeddings")
    assert HEADS["rtd"].how_it_starts(cfg) == "fresh"
    assert [name for name in HEADS if pools(name)] == ["nsp", "classify"]


def test_a_sequence_head_without_pooler_is_a_bias_free_linear_layer_on_the_pooled_token(special):
    """GPT's fine-tuning head, as HF's GPT2/LlamaForSequenceClassification: the last token's
    final hidden state times `score`, nothing before it (no dropout even in training), and no
    next-sentence pooler to start from."""
    from lmlab.model.heads import make_head
    from lmlab.model.selectors import Pooling

    cfg = preset("gpt2-tiny", special.vocab_size, 64, dropout=0.5)
    head = make_head("classify", cfg, num_labels=3, pooler=False)
    assert set(head.state_dict()) == {"classifier.weight"}
    embedding = torch.nn.Embedding(special.vocab_size, cfg.d_model)
    head.start_from({"nsp": make_head("nsp", cfg)}, embedding)  # nothing to take
    model = LanguageModel(cfg, heads={"classify": head}).train()
    ids = random_block(special, 2, 10)
    weights = torch.zeros(2, 10)
    weights[0, 9], weights[1, 4] = 1.0, 1.0  # the last token of rows of 10 and 5 tokens
    out = model(ids, MaskSpec("causal"), predict_at={"classify": Pooling(weights)})
    last = out["hidden"][torch.arange(2), torch.tensor([9, 4])]
    torch.testing.assert_close(out["classify"], last @ head.classifier.weight.T)
