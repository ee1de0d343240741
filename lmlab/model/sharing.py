"""How a generator shares its token embedding with the model beside it: as ELECTRA does, or
by DeBERTa-v3's gradient-disentangled embedding sharing (GDES).

GDES: He et al. 2021, "DeBERTaV3: Improving DeBERTa using ELECTRA-Style Pre-Training with
Gradient-Disentangled Embedding Sharing".

ELECTRA gives both one table, trained by both losses, which pull it opposite ways (the
generator's MLM draws tokens of similar meaning together, the discriminator's loss tells them
apart: DeBERTa-v3's "tug-of-war"). GDES keeps the table E_G the generator's, trained by its MLM
loss alone, and has the model read sg(E_G) + E_Δ: the discriminator's loss reaches only E_Δ, a
residual table that starts at zero, so step 0 reads what ELECTRA's sharing reads. After
pre-training the model's table is E_G + E_Δ (`merge_sharing`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

SHARINGS = ("electra", "gdes")


class DisentangledEmbedding(nn.Embedding):
    """The model's token embedding under GDES: `weight` is E_G, the table the generator ties
    to (`table`'s own, so building one draws no random numbers); `residual` is E_Δ (V, d),
    zero at first. Reads sg(E_G)[ids] + E_Δ[ids]."""

    def __init__(self, table: nn.Embedding) -> None:
        super().__init__(*table.weight.shape, _weight=table.weight)
        self.residual = nn.Parameter(torch.zeros_like(table.weight))

    def forward(self, input_ids: Tensor) -> Tensor:
        shared = F.embedding(input_ids, self.weight.detach())  # (B, T, d) sg(E_G)
        return shared + F.embedding(input_ids, self.residual)  # (B, T, d)

    def merged(self) -> nn.Embedding:
        """E_G + E_Δ as one plain table: what the model reads, as any embedding holds it."""
        with torch.no_grad():
            return nn.Embedding.from_pretrained(self.weight + self.residual, freeze=False)

    def _load_from_state_dict(self, state_dict, prefix, *args) -> None:
        # A plain table (a run trained without GDES, or one merged) loads as E_G with E_Δ at
        # zero, so the model reads that table as it was: continued pre-training starts so.
        state_dict.setdefault(prefix + "residual", torch.zeros_like(self.residual))
        super()._load_from_state_dict(state_dict, prefix, *args)


def merge_sharing(model: nn.Module) -> None:
    """`model` (a LanguageModel) reading one plain table E_G + E_Δ from here on, as
    fine-tuning, embeddings and export take it; a generator keeps E_G, its own from now on.
    Every output stays the same. A model without GDES is left as it is."""
    embedding = model.backbone.token_embedding
    if isinstance(embedding, DisentangledEmbedding):
        model.backbone.token_embedding = embedding.merged()
