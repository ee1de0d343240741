"""What a head reads is said by the selector's type: a batch's selectors cut into micro-batches
stack back into the same selection, each kind's `every` reads what None reads, a head refuses a
kind it cannot read, and composites ask for their heads with selectors of the right kind."""

import pytest
import torch

from lmlab.config.presets import preset
from lmlab.model import LanguageModel, MaskSpec
from lmlab.model.selectors import Pooling, Positions, Rows, stacked
from lmlab.objectives import Alternating, CausalLM, MaskedLM, MaskedLMWithNSP, Mixture
from tests.conftest import random_block, seeded

ROWS, LENGTH = 5, 6
SELECTORS = [Positions(torch.tensor([0, 4, 7, 13, 20, 29])), Rows(torch.tensor([0, 2, 3])),
             Pooling(torch.rand(ROWS, LENGTH, generator=seeded(1)))]


@pytest.mark.parametrize("selector", SELECTORS, ids=lambda s: type(s).__name__)
def test_rows_cut_apart_and_stacked_again_select_the_same(selector):
    cuts = [(0, 2), (2, 3), (3, 5)]
    parts = [selector.rows(start, stop, LENGTH) for start, stop in cuts]
    whole = stacked([p.shifted(start, LENGTH) for p, (start, _) in zip(parts, cuts, strict=True)])
    assert type(whole) is type(selector) and torch.equal(whole.tensor, selector.tensor)


def test_each_kind_reads_its_part_of_the_hidden_states():
    hidden = torch.randn(ROWS, LENGTH, 4, generator=seeded(2))
    positions, rows, pooling = SELECTORS
    assert torch.equal(positions.read(hidden), hidden.reshape(-1, 4)[positions.flat])
    assert torch.equal(rows.read(hidden), hidden[[0, 2, 3], 0])
    torch.testing.assert_close(pooling.read(hidden)[1], pooling.weights[1] @ hidden[1])
    assert torch.equal(Positions.where(torch.eye(3, dtype=torch.bool)).flat,
                       torch.tensor([0, 4, 8]))


def test_stacking_selectors_of_different_kinds_is_refused():
    with pytest.raises(ValueError, match="cannot stack selectors of different kinds: "
                                         "Positions, Rows"):
        stacked(SELECTORS[:2])


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return LanguageModel(preset("bert-tiny", 120, LENGTH, dropout=0.0),
                         heads=("mlm", "nsp", "answer")).eval()


def test_every_kind_s_every_reads_what_none_reads(model):
    ids, mask = torch.randint(10, 120, (ROWS, LENGTH)), MaskSpec("bidirectional")
    dense = model(ids, mask, predict_at={"mlm": None, "nsp": None})
    every = {kind: model(ids, mask, predict_at={"mlm": Positions.every(ROWS, LENGTH),
                                                "nsp": kind.every(ROWS, LENGTH)})
             for kind in (Rows, Pooling)}
    for outputs in every.values():
        torch.testing.assert_close(outputs["nsp"], dense["nsp"])
        torch.testing.assert_close(outputs["mlm"], dense["mlm"].reshape(ROWS * LENGTH, -1))


@pytest.mark.parametrize("head, at, reads", [
    ("mlm", Rows(torch.tensor([0])), "reads Positions, None; it was given Rows"),
    ("nsp", Positions(torch.tensor([0])), "reads Rows, Pooling, None; it was given Positions"),
    ("answer", Positions(torch.tensor([0])), "reads None; it was given Positions"),
    ("mlm", torch.tensor([0]), "reads Positions, None; it was given Tensor")])
def test_a_head_refuses_a_selector_it_cannot_read(model, head, at, reads):
    with pytest.raises(ValueError, match=f"the '{head}' head \\(\\w+\\) {reads}"):
        model(torch.randint(10, 120, (2, LENGTH)), MaskSpec("bidirectional"),
              predict_at={head: at})


def test_a_batch_moves_its_selectors_with_it(special):
    batch = MaskedLM(special).make_batch(random_block(special, 2, 16), seeded(3))
    batch.predict_at["nsp"] = Pooling(torch.ones(2, 16) / 16)
    moved = batch.to("meta")
    assert {type(at): at.tensor.device.type for at in moved.predict_at.values()} == {
        Positions: "meta", Pooling: "meta"}


def test_a_mixture_stacks_each_part_s_selection_under_its_rows(special):
    mixture = Mixture([CausalLM(special), MaskedLM(special)], [1, 1])
    tokens = random_block(special, 4, 16, seed=4)
    batch = mixture.make_batch(tokens, seeded(5))
    masked = MaskedLM(special).make_batch(tokens[2:], seeded(5))
    assert torch.equal(batch.predict_at["lm"].flat, torch.arange(2 * 16))  # clm: every token
    assert torch.equal(batch.predict_at["mlm"].flat, masked.predict_at["mlm"].flat + 2 * 16)


def test_a_composite_asks_for_its_idle_heads_at_nothing_of_their_kind(special):
    alternating = Alternating([CausalLM(special), MaskedLMWithNSP(MaskedLM(special))], 1)
    model = LanguageModel(preset("bert-tiny", special.vocab_size, 32), heads=alternating.heads)
    batch = alternating.make_batch(random_block(special, 4, 32), seeded(6), step=0)
    assert {head: type(at) for head, at in batch.predict_at.items()} == {
        "lm": type(None), "mlm": Positions, "nsp": Rows}
    assert len(batch.predict_at["mlm"].flat) == len(batch.predict_at["nsp"].index) == 0
    alternating.loss(model(**batch.model_inputs()), batch).mean().backward()
    assert all(p.grad is not None for p in model.heads.parameters())
