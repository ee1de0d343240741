"""`--init`: a model started from another run computes what the source computes before any
update (backbone and kept heads exactly), and each head the source lacks starts as documented:
imported BERT (with and without its MLM head), GPT-2 and Llama with grouped-query attention."""

from __future__ import annotations

import pytest
import torch

from lmlab.export.importer import import_hf
from lmlab.model import MaskSpec
from lmlab.model.heads import MLMHead, SequenceHead
from lmlab.runs.layout import split_init
from lmlab.train.warm_start import InitError, load_source, warm_started_model
from tests.test_hf_import import saved_bert, saved_gpt2, saved_llama

SOURCES = {
    "bert-mlm": (saved_bert, {"class_name": "BertForMaskedLM"}),
    "bert-encoder": (saved_bert, {"class_name": "BertModel"}),
    "gpt2": (saved_gpt2, {}),
    "llama-gqa": (saved_llama, {}),
}


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """Each source imported once: name → its run directory."""
    runs = {}
    for name, (save, options) in SOURCES.items():
        root = tmp_path_factory.mktemp(name)
        save(root / "hf", **options)
        runs[name] = import_hf(root / "hf", root / "run").out
    return runs


def sample_ids(vocab_size: int) -> torch.Tensor:
    return torch.randint(10, vocab_size, (2, 12), generator=torch.Generator().manual_seed(3))


@torch.no_grad()
def outputs(model, ids: torch.Tensor, causal: bool) -> dict:
    model.eval()
    return model(ids, MaskSpec("causal" if causal else "bidirectional"))


@pytest.mark.parametrize("name,heads,kept", [
    ("bert-mlm", ("mlm",), ("mlm",)), ("bert-mlm", ("mlm", "nsp"), ("mlm",)),
    ("bert-encoder", ("mlm",), ()), ("bert-encoder", ("lm",), ()),
    ("gpt2", ("lm",), ("lm",)), ("gpt2", ("lm", "mlm"), ("lm",)),
    ("llama-gqa", ("lm",), ("lm",)), ("llama-gqa", ("mlm",), ()),
])
def test_the_new_model_computes_what_the_source_computes(imported, name, heads, kept):
    source = load_source(str(imported[name]))
    model = warm_started_model(source, heads)
    assert model.cfg == source.model_cfg and tuple(model.heads) == heads
    ids = sample_ids(model.cfg.vocab_size)
    causal = not name.startswith("bert")
    ours, theirs = outputs(model, ids, causal), outputs(source.run.model, ids, causal)
    assert torch.equal(ours["hidden"], theirs["hidden"])
    assert torch.equal(model.backbone.token_embedding.weight,
                       source.run.model.backbone.token_embedding.weight)
    for head in kept:
        assert torch.equal(ours[head], theirs[head])


def test_a_new_bert_mlm_head_has_a_fresh_transform_and_a_zero_bias(imported):
    source = load_source(str(imported["bert-encoder"]))
    assert "mlm" not in source.run.model.heads  # as sentence-transformers models come
    torch.manual_seed(0)
    head = warm_started_model(source, ("mlm",)).heads["mlm"]
    assert isinstance(head, MLMHead)
    std = source.model_cfg.init_std
    assert abs(float(head.transform.weight.detach().std()) - std) < 0.3 * std  # N(0, init_std)
    assert torch.count_nonzero(head.transform.bias) == 0
    assert torch.count_nonzero(head.decoder.bias) == 0
    assert torch.equal(head.norm.weight, torch.ones_like(head.norm.weight))
    assert torch.count_nonzero(head.norm.bias) == 0


def test_a_new_head_of_a_tied_model_shares_the_embedding(imported):
    for name, heads in (("bert-encoder", ("mlm",)), ("bert-encoder", ("lm",)),
                        ("gpt2", ("lm", "mlm"))):
        model = warm_started_model(load_source(str(imported[name])), heads)
        for head in model.heads.values():
            assert head.decoder.weight is model.backbone.token_embedding.weight


def test_a_new_head_of_an_untied_model_starts_as_a_copy_of_the_embedding(imported):
    source = load_source(str(imported["llama-gqa"]))
    assert not source.model_cfg.tie_embeddings
    model = warm_started_model(source, ("lm", "mlm"))
    embedding = model.backbone.token_embedding.weight
    mlm = model.heads["mlm"].decoder.weight
    assert mlm is not embedding and torch.equal(mlm, embedding)
    # the source's own lm head is kept, not replaced
    assert torch.equal(model.heads["lm"].decoder.weight,
                       source.run.model.heads["lm"].decoder.weight)
    assert not torch.equal(model.heads["lm"].decoder.weight, embedding)


def test_a_new_nsp_head_starts_fresh(imported):
    source = load_source(str(imported["bert-mlm"]))
    torch.manual_seed(0)
    nsp = warm_started_model(source, ("mlm", "nsp")).heads["nsp"]
    assert isinstance(nsp, SequenceHead)
    assert torch.count_nonzero(nsp.pooler.bias) == 0
    assert torch.count_nonzero(nsp.classifier.bias) == 0


@pytest.mark.parametrize("text,expected", [
    ("runs/a", ("runs/a", "best")), ("runs/a:last", ("runs/a", "last")),
    ("runs/a:step-00000004", ("runs/a", "step-00000004")), ("runs/a:", ("runs/a", "best"))])
def test_the_source_and_its_checkpoint(text, expected):
    run, checkpoint = split_init(text)
    assert (str(run), checkpoint) == expected


def test_a_directory_that_is_no_run_is_one_line(tmp_path):
    with pytest.raises(InitError, match=rf"--init {tmp_path}: {tmp_path}: not an lmlab run"):
        load_source(str(tmp_path))
