"""A run pre-trained with replaced-token detection as Hugging Face's ELECTRA discriminator
(`ElectraForPreTraining`, or `ElectraModel` bare). ELECTRA's encoder is BERT's with its
embeddings as wide as its blocks, so the weights are BERT's table under `electra.` plus the
discriminator head; the generator stays behind, as in ELECTRA's released discriminators."""

from __future__ import annotations

from torch import Tensor

from lmlab.export.hf import to_hf_state_dict
from lmlab.model import LanguageModel

# The heads a replaced-token detection run has, and those ElectraForPreTraining holds.
RTD_HEADS = ("generator", "rtd")
DISCRIMINATOR = {"heads.rtd.transform": "discriminator_predictions.dense",
                 "heads.rtd.score": "discriminator_predictions.dense_prediction"}


def electra_config(model: LanguageModel) -> dict:
    """What ELECTRA's config.json adds to or changes in BERT's (`hf_config_dict` extras)."""
    return {"model_type": "electra", "embedding_size": model.cfg.d_model}


def electra_weights(model: LanguageModel, bare: bool = False) -> dict[str, Tensor]:
    """ELECTRA-named weights of `model`'s backbone (bare: ElectraModel's names, no prefix) and,
    unless bare, its discriminator head; tensors may share memory with the model."""
    encoder = LanguageModel(model.cfg, heads=())
    encoder.backbone = model.backbone  # BERT's table for the backbone alone
    prefix = "" if bare else "electra."
    state = {prefix + key.removeprefix("bert."): tensor
             for key, tensor in to_hf_state_dict(encoder, "bert").items()}
    if not bare:
        for ours, theirs in DISCRIMINATOR.items():
            for name in ("weight", "bias"):
                state[f"{theirs}.{name}"] = model.state_dict()[f"{ours}.{name}"]
    return state

