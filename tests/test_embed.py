"""Embeddings: pooled over a text's own tokens, independent of the batch they come in."""

import numpy as np
import pytest
import torch

from lmlab import Pretrained
from lmlab.config.presets import preset
from lmlab.infer.embed import save_npy
from lmlab.model import LanguageModel, MaskSpec
from lmlab.objectives import SpecialTokens
from tests.conftest import seeded

SPECIAL = SpecialTokens.layout(80)


def pretrained_for(family: str, objective: str, heads=("mlm",)) -> Pretrained:
    torch.manual_seed(0)
    cfg = preset(f"{family}-tiny", vocab_size=SPECIAL.vocab_size, max_seq_len=64, dropout=0.0)
    return Pretrained.of(LanguageModel(cfg, heads).eval(), objective, SPECIAL)


def text(length: int, seed: int) -> list[int]:
    return torch.randint(10, SPECIAL.vocab_size, (length,), generator=seeded(seed)).tolist()


@pytest.mark.parametrize("family,objective,heads", [
    ("bert", "mlm", ("mlm",)), ("bert", "mlm+nsp", ("mlm", "nsp")), ("gpt2", "clm", ("lm",))])
@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_padding_does_not_change_a_texts_embedding(family, objective, heads, pooling):
    pretrained = pretrained_for(family, objective, heads)
    if pooling == "cls" and objective == "clm":
        with pytest.raises(ValueError, match="use mean pooling"):
            pretrained.embed(text(5, 0), pooling)
        return
    short = text(4, seed=1)
    alone = pretrained.embed(short, pooling)
    batch = pretrained.embed([text(40, seed=2), short, text(9, seed=3)], pooling)
    assert batch.shape == (3, 64) and batch.dtype == np.float32
    np.testing.assert_allclose(batch[1], alone, atol=1e-5)


def test_mean_pooling_averages_the_texts_own_tokens_and_mean_all_every_token_read():
    pretrained = pretrained_for("bert", "mlm")
    ids = text(7, seed=4)
    # The model reads the text as training read documents: followed by [EOS].
    document = torch.tensor([[*ids, SPECIAL.eos]])
    with torch.no_grad():
        hidden = pretrained.model(document, MaskSpec("bidirectional"), predict_at={})["hidden"]
    np.testing.assert_allclose(pretrained.embed(ids, "mean"), hidden[0, :7].mean(0).numpy(),
                               atol=1e-5)
    # the default, as sentence-transformers pools: the [EOS] too
    np.testing.assert_allclose(pretrained.embed(ids), hidden[0].mean(0).numpy(), atol=1e-5)
    np.testing.assert_allclose(pretrained.embed(ids, "cls"), hidden[0, 0].numpy(), atol=1e-5)


def test_nsp_models_pool_their_cls_token():
    pretrained = pretrained_for("bert", "mlm+nsp", ("mlm", "nsp"))
    ids = text(6, seed=5)
    document = torch.tensor([[SPECIAL.cls, *ids, SPECIAL.sep]])
    with torch.no_grad():
        hidden = pretrained.model(document, MaskSpec("bidirectional"), predict_at={})["hidden"]
    np.testing.assert_allclose(pretrained.embed(ids, "cls"), hidden[0, 0].numpy(), atol=1e-5)
    np.testing.assert_allclose(pretrained.embed(ids, "mean"), hidden[0, 1:7].mean(0).numpy(),
                               atol=1e-5)
    np.testing.assert_allclose(pretrained.embed(ids), hidden[0].mean(0).numpy(), atol=1e-5)


def test_normalized_embeddings_have_unit_length():
    vectors = pretrained_for("bert", "mlm").embed([text(5, 6), text(12, 7)], normalize=True)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)


def test_bad_requests_are_named():
    pretrained = pretrained_for("bert", "mlm")
    with pytest.raises(ValueError, match="unknown pooling 'max'"):
        pretrained.embed(text(5, 0), "max")
    with pytest.raises(ValueError, match="text 2 is empty"):
        pretrained.embed([text(5, 0), []])
    with pytest.raises(ValueError, match="token id 80 is outside the vocabulary"):
        pretrained.embed([[10, 80]])


def test_npy_files_are_written_whole(tmp_path):
    path = tmp_path / "vectors.npy"
    save_npy(np.ones((2, 3), dtype=np.float32), path)
    save_npy(np.zeros((4, 3), dtype=np.float32), path)
    assert np.load(path).shape == (4, 3)
    assert [p.name for p in tmp_path.iterdir()] == ["vectors.npy"]
