"""A replaced-token detection run as Hugging Face's ELECTRA: identical outputs from
ElectraForPreTraining (the discriminator's scores) and ElectraModel (the hidden states), built
from a tiny random config through the converter export uses; with either embedding sharing
(a GDES model merged as a loaded run is, its word embeddings E_G + E_Δ)."""

import pytest
import torch

from lmlab.config.objective_options import ObjectiveOptions
from lmlab.config.presets import preset
from lmlab.data.special_tokens import SpecialTokens
from lmlab.export.electra import electra_config, electra_weights
from lmlab.export.hf import hf_config_dict
from lmlab.model import LanguageModel, MaskSpec
from lmlab.model.sharing import merge_sharing
from lmlab.objectives.registry import build_objective

transformers = pytest.importorskip("transformers")


SHARINGS = pytest.mark.parametrize("sharing", ["electra", "gdes"])


def rtd_model(sharing: str = "electra", merged: bool = True) -> LanguageModel:
    torch.manual_seed(0)
    cfg = preset("bert-tiny", 96, 32).with_changes(dropout=0.0)
    objective = build_objective("rtd", SpecialTokens.layout(96, 0),
                                ObjectiveOptions(rtd_sharing=sharing))
    model = LanguageModel(cfg, heads=objective.build_heads(cfg)).eval()
    with torch.no_grad():  # biases and norms away from their initial 0 and 1, E_Δ from 0
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.02)
    if merged:
        merge_sharing(model)  # as load_run reads a run
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


@SHARINGS
@pytest.mark.parametrize("architecture", ["ElectraForPreTraining", "ElectraModel"])
def test_every_weight_is_mapped(architecture, sharing):
    model = rtd_model(sharing)
    hf = hf_model(model, architecture)
    expected = {k for k in hf.state_dict() if not k.endswith("position_ids")}
    assert set(electra_weights(model, bare=architecture == "ElectraModel")) == expected


def test_gdes_exports_the_merged_table():
    unmerged = rtd_model("gdes", merged=False)
    embedding = unmerged.backbone.token_embedding
    assert embedding.residual.abs().sum() > 0
    exported = electra_weights(rtd_model("gdes"))["electra.embeddings.word_embeddings.weight"]
    assert torch.equal(exported, embedding.weight + embedding.residual)


@SHARINGS
def test_discriminator_scores_match_electra_for_pretraining(sharing):
    model = rtd_model(sharing)
    hf = hf_model(model, "ElectraForPreTraining")
    ids, attention = inputs()
    with torch.no_grad():
        theirs = hf(input_ids=ids, attention_mask=attention).logits  # (B, T)
        ours = model(ids, MaskSpec("bidirectional", segment_ids=attention),
                     predict_at={"rtd": None})["rtd"].squeeze(-1)
    real = attention.bool()
    assert torch.allclose(ours[real], theirs[real], atol=1e-5)


@SHARINGS
def test_hidden_states_match_electra_model(sharing):
    model = rtd_model(sharing)
    hf = hf_model(model, "ElectraModel")
    ids, attention = inputs()
    with torch.no_grad():
        theirs = hf(input_ids=ids, attention_mask=attention).last_hidden_state
        ours = model(ids, MaskSpec("bidirectional", segment_ids=attention),
                     predict_at={})["hidden"]
    real = attention.bool()
    assert torch.allclose(ours[real], theirs[real], atol=1e-5)


@pytest.mark.slow
@SHARINGS
def test_lmlab_export_writes_electra_for_pretraining(tmp_path, sharing):
    import json
    import random

    from safetensors.torch import load_file

    from tests.cli_process import lmlab
    from tests.test_end_to_end import TINY, sentence
    rng = random.Random(0)
    (tmp_path / "corpus.jsonl").write_text("".join(
        json.dumps({"text": " ".join(sentence(rng) for _ in range(4))}) + "\n"
        for _ in range(200)))
    lmlab("prepare", tmp_path / "corpus.jsonl", "--out", tmp_path / "data", "--vocab-size", "300")
    lmlab("pretrain", "--objective", "rtd", "--data", tmp_path / "data", "--model", "bert-tiny",
          "--seq-len", "32", "--rtd-sharing", sharing, *TINY, "--out", tmp_path / "run")
    lmlab("export", tmp_path / "run", "--out", tmp_path / "hf")
    record = json.loads((tmp_path / "hf" / "lmlab-export.json").read_text())
    assert record["architecture"] == "ElectraForPreTraining"
    assert record["max_difference"] < 1e-4
    (weights,) = (tmp_path / "run" / "checkpoints").glob("*/model.safetensors")
    residual = load_file(weights).get("backbone.token_embedding.residual")
    # GDES saves E_Δ apart, trained away from zero by the discriminator's loss
    assert (residual is not None and residual.abs().sum() > 0) == (sharing == "gdes")
