"""Parity with Hugging Face transformers, both directions, through the production converter.

Tiny configs and random weights, so nothing is downloaded. Every parameter is jittered so that
zero biases and unit norms cannot hide a swapped or missing tensor. Each side's logits, final
hidden states and training loss (HF's from `labels=`, lmlab's from its objectives) must agree.
Batches are right-padded, and per-token outputs are compared only where tokens are real: the
two sides treat padding queries differently (HF lets them see real keys, lmlab keeps them in
segment 0), and nothing reads them.
"""

import os

import pytest
import torch

from lmlab.config import ModelConfig
from lmlab.config.presets import preset
from lmlab.export import (
    config_from_hf,
    family_of,
    from_hf_state_dict,
    hf_config,
    to_hf_state_dict,
)
from lmlab.export.hf import HF_FAMILIES
from lmlab.model import LanguageModel, MaskSpec
from lmlab.model.selectors import Positions
from lmlab.objectives import (
    IGNORE_INDEX,
    Batch,
    CausalLM,
    MaskedLM,
    MaskedLMWithNSP,
    SpecialTokens,
)
from lmlab.objectives.losses import next_token_targets

if os.environ.get("CI"):
    import transformers  # CI installs the dev extras, so there a missing one must fail
else:
    transformers = pytest.importorskip("transformers")

# family → (HF class, lmlab heads it carries, attention kind)
CASES = {
    "bert": ("BertForPreTraining", ("mlm", "nsp"), "bidirectional"),
    "gpt2": ("GPT2LMHeadModel", ("lm",), "causal"),
    "modern": ("LlamaForCausalLM", ("lm",), "causal"),
}
FAMILIES = list(CASES)
VOCAB, LENGTH = 120, 16
LENGTHS = torch.tensor([LENGTH, 11, 5])  # one full row, two right-padded
TOLERANCE = dict(atol=1e-5, rtol=1e-4)


def tiny_config(family: str) -> ModelConfig:
    """Tied embeddings in every family, so each table's tied keys are exercised."""
    return preset(f"{family}-tiny", vocab_size=VOCAB, max_seq_len=32, dropout=0.0,
                  tie_embeddings=True)


def make_batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """input_ids, attention mask (1 = real), token types with both segments A (0) and B (1)."""
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, VOCAB, (len(LENGTHS), LENGTH), generator=generator)
    attention_mask = (torch.arange(LENGTH) < LENGTHS[:, None]).long()
    token_types = (torch.arange(LENGTH) >= 3).long() * attention_mask
    return ids, attention_mask, token_types


def jitter(module: torch.nn.Module, seed: int) -> torch.nn.Module:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in module.parameters():  # tied parameters are listed once: stay tied
            parameter.add_(0.05 * torch.randn(parameter.shape, generator=generator))
    return module.eval()


def random_lmlab(family: str) -> LanguageModel:
    torch.manual_seed(0)
    return jitter(LanguageModel(tiny_config(family), CASES[family][1]), seed=1)


def hf_model(family: str, class_name: str | None = None) -> torch.nn.Module:
    torch.manual_seed(0)
    hf_class = getattr(transformers, class_name or CASES[family][0])
    return hf_class(hf_config(tiny_config(family), family)).eval()


def loss_labels() -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's labels: MLM targets at every third real token, and NSP labels for the rows."""
    ids, attention_mask, _ = make_batch()
    chosen = attention_mask.bool() & (torch.arange(LENGTH) % 3 == 1)
    return torch.where(chosen, ids, IGNORE_INDEX), torch.tensor([0, 1, 1])


def lmlab_loss(model: LanguageModel, family: str) -> torch.Tensor:
    """The training loss as lmlab's objectives compute it, on lmlab's own targets."""
    ids, attention_mask, token_types = make_batch()
    special = SpecialTokens.layout(VOCAB)
    if family == "bert":
        targets, nsp_labels = loss_labels()
        objective = MaskedLMWithNSP(MaskedLM(special))
        batch = Batch(ids, MaskSpec("bidirectional", segment_ids=attention_mask), None, targets,
                      {"mlm": Positions.where(targets != IGNORE_INDEX), "nsp": None},
                      token_type_ids=token_types, extras={"nsp_label": nsp_labels})
    else:
        objective = CausalLM(special)
        batch = Batch(ids, MaskSpec("causal", segment_ids=attention_mask), None,
                      next_token_targets(ids, attention_mask), {"lm": None})
    return objective.loss(model(**batch.model_inputs()), batch).mean()


@torch.no_grad()
def lmlab_outputs(model: LanguageModel, family: str) -> dict[str, torch.Tensor]:
    """Logits of each head, the final hidden states (real tokens only) and the loss."""
    ids, attention_mask, token_types = make_batch()
    mask = MaskSpec(CASES[family][2], segment_ids=attention_mask)
    types = token_types if family == "bert" else None
    outputs = model(ids, mask, token_type_ids=types)
    real = attention_mask.bool()
    found = {"hidden": outputs["hidden"][real], "loss": lmlab_loss(model, family)}
    if family == "bert":
        return {**found, "mlm": outputs["mlm"][real], "nsp": outputs["nsp"]}
    return {**found, "lm": outputs["lm"][real]}


@torch.no_grad()
def hf_outputs(model: torch.nn.Module, family: str) -> dict[str, torch.Tensor]:
    """The same from HF: its last hidden_states entry, and its own loss from `labels=`."""
    ids, attention_mask, token_types = make_batch()
    real = attention_mask.bool()
    if family == "bert":
        mlm_labels, nsp_labels = loss_labels()
        outputs = model(input_ids=ids, attention_mask=attention_mask, token_type_ids=token_types,
                        labels=mlm_labels, next_sentence_label=nsp_labels,
                        output_hidden_states=True)
        return {"hidden": outputs.hidden_states[-1][real], "loss": outputs.loss,
                "mlm": outputs.prediction_logits[real], "nsp": outputs.seq_relationship_logits}
    # HF shifts the labels itself; padding is ignored as -100
    labels = ids.masked_fill(~real, IGNORE_INDEX)
    outputs = model(input_ids=ids, attention_mask=attention_mask, labels=labels,
                    output_hidden_states=True)
    return {"hidden": outputs.hidden_states[-1][real], "loss": outputs.loss,
            "lm": outputs.logits[real]}


def assert_same_outputs(ours: dict[str, torch.Tensor], theirs: dict[str, torch.Tensor]) -> None:
    assert ours.keys() == theirs.keys()
    for name in ours:
        torch.testing.assert_close(ours[name], theirs[name], **TOLERANCE, msg=name)


@pytest.mark.parametrize("family", FAMILIES)
def test_export_matches_hf_outputs(family):
    ours = random_lmlab(family)
    theirs = hf_model(family)
    theirs.load_state_dict(to_hf_state_dict(ours, family), strict=True)
    assert_same_outputs(lmlab_outputs(ours, family), hf_outputs(theirs, family))


@pytest.mark.parametrize("family", FAMILIES)
def test_import_matches_hf_outputs(family):
    theirs = jitter(hf_model(family), seed=2)
    ours = from_hf_state_dict(theirs.state_dict(), tiny_config(family), family).eval()
    assert tuple(ours.heads) == CASES[family][1]  # by default, the HF class's heads
    assert_same_outputs(lmlab_outputs(ours, family), hf_outputs(theirs, family))


@pytest.mark.parametrize("family", FAMILIES)
def test_import_with_the_config_read_from_hf_matches_hf_outputs(family):
    theirs = jitter(hf_model(family), seed=5)
    found, cfg = config_from_hf(theirs.config.to_dict())
    assert (found, cfg) == (family, tiny_config(family))
    ours = from_hf_state_dict(theirs.state_dict(), cfg, found).eval()
    assert_same_outputs(lmlab_outputs(ours, family), hf_outputs(theirs, family))


@pytest.mark.parametrize("family", FAMILIES)
def test_round_trip_is_exact(family):
    ours = random_lmlab(family)
    back = from_hf_state_dict(to_hf_state_dict(ours, family), ours.cfg, family)
    expected, got = ours.state_dict(), back.state_dict()
    assert expected.keys() == got.keys()
    for key in expected:
        assert torch.equal(expected[key], got[key]), key


@pytest.mark.parametrize("family", FAMILIES)
def test_import_restores_tied_keys_that_saved_checkpoints_omit(family):
    theirs = jitter(hf_model(family), seed=3)
    saved = {key: tensor for key, tensor in theirs.state_dict().items()
             if key not in HF_FAMILIES[family].tied}
    ours = from_hf_state_dict(saved, tiny_config(family), family)
    decoder = ours.heads[CASES[family][1][0]].decoder
    assert decoder.weight is ours.backbone.token_embedding.weight
    assert_same_outputs(lmlab_outputs(ours.eval(), family), hf_outputs(theirs, family))


def test_import_of_fewer_heads_leaves_the_others_out():
    pretraining = jitter(hf_model("bert"), seed=4).state_dict()
    ours = from_hf_state_dict(pretraining, tiny_config("bert"), "bert", heads=("mlm",))
    masked_lm = hf_model("bert", "BertForMaskedLM")  # no pooler, no NSP classifier
    masked_lm.load_state_dict(to_hf_state_dict(ours, "bert"), strict=True)


def test_missing_and_unexpected_keys_are_named():
    state = hf_model("gpt2").state_dict()
    del state["transformer.h.1.mlp.c_fc.bias"]
    state["transformer.h.9.attn.c_attn.weight"] = torch.zeros(1)
    with pytest.raises(ValueError, match=r"missing \[transformer\.h\.1\.mlp\.c_fc\.bias\], "
                                         r"unexpected \[transformer\.h\.9\.attn\.c_attn\.weight\]"):
        from_hf_state_dict(state, tiny_config("gpt2"), "gpt2")


@pytest.mark.parametrize("family", FAMILIES)
def test_family_of_presets(family):
    assert family_of(tiny_config(family)) == family


def test_configs_outside_every_family_are_refused():
    rotary_bert = tiny_config("bert").with_changes(positions="rotary")
    with pytest.raises(ValueError, match="matches no Hugging Face family"):
        family_of(rotary_bert)
    with pytest.raises(ValueError, match="does not fit the modern family"):
        to_hf_state_dict(random_lmlab("gpt2"), "modern")
