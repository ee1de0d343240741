"""A replaced-token detection run as Hugging Face's ELECTRA: identical outputs from
ElectraForPreTraining (the discriminator's scores) and ElectraModel (the hidden states), built
from a tiny random config through the converter export uses."""

import pytest
import torch

from lmlab.config.presets import preset
from lmlab.data.special_tokens import SpecialTokens
from lmlab.export.electra import electra_config, electra_weights
from lmlab.export.hf import hf_config_dict
from lmlab.model import LanguageModel, MaskSpec
from lmlab.objectives.registry import build_objective

transformers = pytest.importorskip("transformers")


def rtd_model() -> LanguageModel:
    torch.manual_seed(0)
    cfg = preset("bert-tiny", 96, 32).with_changes(dropout=0.0)
    objective = build_objective("rtd", SpecialTokens.layout(96, 0))
    model = LanguageModel(cfg, heads=objective.build_heads(cfg)).eval()
    with torch.no_grad():  # biases and norms away from their initial 0 and 1
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.02)
    return model


def hf_model(model: LanguageModel, architecture: str):
    settings = hf_config_dict(model.cfg, "bert", **electra_config(model))
    settings.pop("model_type")
    config = transformers.ElectraConfig(**settings, attn_implementation="eager")
    hf = getattr(transformers, architecture)(config).eval()
    hf.load_state_dict(electra_weights(model, bare=architecture == "ElectraModel"),
                       strict=False)
    return hf


def inputs():
    ids = torch.randint(5, 96, (2, 12), generator=torch.Generator().manual_seed(1))
    attention = torch.ones(2, 12, dtype=torch.long)
    attention[1, 8:] = 0
    return ids, attention


@pytest.mark.parametrize("architecture", ["ElectraForPreTraining", "ElectraModel"])
def test_every_weight_is_mapped(architecture):
    model = rtd_model()
    hf = hf_model(model, architecture)
    expected = {k for k in hf.state_dict() if not k.endswith("position_ids")}
    assert set(electra_weights(model, bare=architecture == "ElectraModel")) == expected


def test_discriminator_scores_match_electra_for_pretraining():
    model = rtd_model()
    hf = hf_model(model, "ElectraForPreTraining")
    ids, attention = inputs()
    with torch.no_grad():
        theirs = hf(input_ids=ids, attention_mask=attention).logits  # (B, T)
        ours = model(ids, MaskSpec("bidirectional", segment_ids=attention),
                     predict_at={"rtd": None})["rtd"].squeeze(-1)
    real = attention.bool()
    assert torch.allclose(ours[real], theirs[real], atol=1e-5)


def test_hidden_states_match_electra_model():
    model = rtd_model()
    hf = hf_model(model, "ElectraModel")
    ids, attention = inputs()
    with torch.no_grad():
        theirs = hf(input_ids=ids, attention_mask=attention).last_hidden_state
        ours = model(ids, MaskSpec("bidirectional", segment_ids=attention),
                     predict_at={})["hidden"]
    real = attention.bool()
    assert torch.allclose(ours[real], theirs[real], atol=1e-5)


@pytest.mark.slow
def test_lmlab_export_writes_electra_for_pretraining(tmp_path):
    import json
    import random

    from tests.cli_process import lmlab
    from tests.test_end_to_end import TINY, sentence
    rng = random.Random(0)
    (tmp_path / "corpus.jsonl").write_text("".join(
        json.dumps({"text": " ".join(sentence(rng) for _ in range(4))}) + "\n"
        for _ in range(200)))
    lmlab("prepare", tmp_path / "corpus.jsonl", "--out", tmp_path / "data", "--vocab-size", "300")
    lmlab("pretrain", "--objective", "rtd", "--data", tmp_path / "data", "--model", "bert-tiny",
          "--seq-len", "32", *TINY, "--out", tmp_path / "run")
    lmlab("export", tmp_path / "run", "--out", tmp_path / "hf")
    record = json.loads((tmp_path / "hf" / "lmlab-export.json").read_text())
    assert record["architecture"] == "ElectraForPreTraining"
    assert record["max_difference"] < 1e-4
