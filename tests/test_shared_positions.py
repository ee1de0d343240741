"""Rows that are each one document from position 0 share one (T,) row of positions: the model
computes them (and rotary's angles) once, not once a row, with the same result."""

import pytest
import torch

from lmlab import preset
from lmlab.model import LanguageModel
from lmlab.model.masks import MaskSpec
from lmlab.objectives import MaskedLM, MaskedLMWithNSP
from tests.conftest import random_block, seeded


@pytest.mark.parametrize("name", ["bert-mini", "modern-mini"])  # learned and rotary positions
def test_shared_positions_give_what_per_row_positions_give(special, name):
    torch.manual_seed(0)
    model = LanguageModel(preset(name, special.vocab_size, 16, n_layers=2)).eval()
    ids = random_block(special, 3, 16)
    mask = MaskSpec("bidirectional")
    shared = model.backbone(ids, mask, torch.arange(16))
    per_row = model.backbone(ids, mask, torch.arange(16).expand(3, 16))
    assert shared.shape == (3, 16, model.cfg.d_model)
    assert torch.equal(shared, per_row)


def test_an_nsp_batch_shares_its_positions_and_its_micro_batches_keep_them(special):
    block = random_block(special, 4, 16)
    block[:, 6] = block[:, 11] = special.sep  # sentence ends
    batch = MaskedLMWithNSP(MaskedLM(special)).make_batch(block, seeded())
    assert batch.positions.tolist() == list(range(16))
    assert torch.equal(batch.rows(1, 3).positions, batch.positions)

