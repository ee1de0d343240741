"""ELECTRA's generator (Clark et al. 2020): a small masked LM beside the model, over the same
input ids and the shared token embedding, whose samples the discriminator judges."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from lmlab.config import ModelConfig
from lmlab.kernels.linear import Linear
from lmlab.model.head import Head
from lmlab.model.layers import make_norm
from lmlab.model.selectors import Positions
from lmlab.model.sharing import SHARINGS
from lmlab.model.transformer import Transformer

GENERATOR_SIZES = ("width/4", "width/2", "depth/2")


def generator_config(cfg: ModelConfig, size: str) -> ModelConfig:
    """The generator's shape beside a discriminator of shape `cfg`: a quarter or half of its
    width (ELECTRA's 1/4-1/2, heads scaled alike), or half its depth (DeBERTa-v3)."""
    if size not in GENERATOR_SIZES:
        raise ValueError(f"generator size {size!r} is not one of {', '.join(GENERATOR_SIZES)}")
    what, _, divisor = size.partition("/")
    if what == "depth":
        layers = max(1, cfg.n_layers // int(divisor))  # the switches its depth allows
        return cfg.with_changes(n_layers=layers, unet_skips=cfg.unet_skips and layers > 1,
                                value_embeddings=min(cfg.value_embeddings, layers // 2))
    heads = max(1, cfg.n_heads // int(divisor))
    width = max(cfg.d_model // int(divisor), heads * 2)  # an even head size for rotary
    return cfg.with_changes(d_model=width, n_heads=heads, n_kv_heads=None, head_size=None,
                            ffn_size=None)


class GeneratorHead(Head):
    """A small masked LM over the input ids (ELECTRA's generator): the shared token embedding,
    projected to its width when narrower, its own blocks, then BERT's prediction head back at
    the embedding's width with the decoder tied to the shared embedding. Logits (N, V) at
    `at` (None: everywhere). `sharing` (lmlab.model.sharing): "electra", the model reads the
    shared table as it is; "gdes", through a stop-gradient plus a residual of its own."""

    reads_inputs = True

    @classmethod
    def how_it_starts(cls, cfg: ModelConfig) -> str:
        return "fresh blocks, token embedding shared with the backbone"

    def __init__(self, cfg: ModelConfig, size: str = "width/4", sharing: str = "electra") -> None:
        super().__init__()
        if sharing not in SHARINGS:
            raise ValueError(f"embedding sharing {sharing!r} is not one of {', '.join(SHARINGS)}")
        self.gradient_disentangled = sharing == "gdes"
        inner = generator_config(cfg, size)
        self.encoder = Transformer(inner)
        if inner.d_model != cfg.d_model:  # ELECTRA's `embeddings_project`
            self.encoder.token_embedding = nn.Sequential(
                nn.Embedding(cfg.vocab_size, cfg.d_model), Linear(cfg.d_model, inner.d_model))
        self.transform = Linear(inner.d_model, cfg.d_model)
        self.norm = make_norm(cfg)
        self.decoder = Linear(cfg.d_model, cfg.vocab_size)

    def tie(self, embedding: nn.Embedding) -> None:
        embedded = self.encoder.token_embedding
        (embedded[0] if isinstance(embedded, nn.Sequential) else embedded).weight = \
            embedding.weight
        self.decoder.weight = embedding.weight

    def forward(self, input_ids: Tensor, mask, positions: Tensor | None = None,
                token_type_ids: Tensor | None = None, at: Positions | None = None) -> Tensor:
        keep = None if at is None else at.flat
        hidden = self.encoder(input_ids, mask, positions, token_type_ids, keep=keep)
        return self.decoder(self.norm(F.gelu(self.transform(hidden))))
