"""Models whose log-probabilities are known in closed form, for the evaluation tests."""

import torch

from lmlab.config.presets import preset
from lmlab.model import LanguageModel
from lmlab.objectives import SpecialTokens


def favouring_model(special: SpecialTokens, favoured: int, logit: float = 5.0,
                    context: int = 16) -> LanguageModel:
    """Every position's final hidden state is the unit vector e0 and the untied decoder gives
    `favoured` a logit of `logit`, every other token 0: the same distribution everywhere."""
    cfg = preset("gpt2-tiny", special.vocab_size, context, tie_embeddings=False)
    model = LanguageModel(cfg, ("lm",)).eval()
    with torch.no_grad():
        model.backbone.final_norm.weight.zero_()
        model.backbone.final_norm.bias.zero_()
        model.backbone.final_norm.bias[0] = 1.0
        model.heads["lm"].decoder.weight.zero_()
        model.heads["lm"].decoder.weight[favoured, 0] = logit
    return model


def uniform_model(special: SpecialTokens, family: str, heads) -> LanguageModel:
    """Zero embeddings tied to the decoder: every logit is 0, every prediction costs ln V."""
    model = LanguageModel(preset(f"{family}-tiny", special.vocab_size, 16), heads).eval()
    with torch.no_grad():
        model.backbone.token_embedding.weight.zero_()
    return model
