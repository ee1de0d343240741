"""Summed losses normalised by the global target count: k micro-batches = one big batch."""

import torch

from lmlab.config.presets import preset
from lmlab.model import LanguageModel
from lmlab.objectives import CausalLM, MaskedLM, MaskedLMWithNSP
from tests.conftest import random_block, seeded


def fresh_model(special, heads):
    torch.manual_seed(0)
    cfg = preset("bert-tiny", special.vocab_size, 64, dropout=0.0)
    return LanguageModel(cfg, heads=heads)


def gradients(model) -> torch.Tensor:
    grads = torch.cat([p.grad.reshape(-1) for p in model.parameters() if p.grad is not None])
    model.zero_grad()
    return grads


def accumulate(model, objective, batches, normalise_globally=True):
    losses = [objective.loss(model(**b.model_inputs()), b) for b in batches]
    totals = {name: sum(loss.terms[name][1] for loss in losses) for name in losses[0].terms}
    for loss in losses:
        (loss.mean(totals if normalise_globally else None) / (1 if normalise_globally
                                                               else len(batches))).backward()
    return gradients(model)


def padded_block(special, rows, length, seed):
    tokens = random_block(special, rows, length, seed)
    lengths = torch.randint(4, length + 1, (rows,), generator=seeded(seed))
    tokens[torch.arange(length)[None, :] >= lengths[:, None]] = special.pad
    return tokens


def test_micro_batches_with_different_target_counts_equal_one_big_batch(special):
    model = fresh_model(special, ("lm",))
    objective = CausalLM(special)
    tokens = padded_block(special, 8, 32, seed=1)
    whole = accumulate(model, objective, [objective.make_batch(tokens, seeded(0))])
    parts = [objective.make_batch(rows, seeded(0)) for rows in tokens.split([3, 5])]
    counts = [int(p.targets.ne(-100).sum()) for p in parts]
    assert counts[0] != counts[1] * 3 / 5  # the micro-batches really differ in targets
    torch.testing.assert_close(accumulate(model, objective, parts), whole, atol=1e-6, rtol=1e-4)
    # the common mistake, averaging per-micro-batch means, gives a different gradient
    naive = accumulate(model, objective, parts, normalise_globally=False)
    assert not torch.allclose(naive, whole, atol=1e-6, rtol=1e-4)


def test_two_loss_terms_are_each_normalised_by_their_own_global_count(special):
    model = fresh_model(special, ("mlm", "nsp"))
    objective = MaskedLMWithNSP(MaskedLM(special, selection="exact"))
    tokens = random_block(special, 8, 40, seed=2)
    tokens[:, 12] = tokens[:, 25] = special.sep
    big = objective.make_batch(tokens, seeded(3))
    whole_loss = objective.loss(model(**big.model_inputs()), big)
    whole = accumulate(model, objective, [big])

    parts = [big.rows(0, 3), big.rows(3, 8)]  # the same pairs and masks, split
    torch.testing.assert_close(accumulate(model, objective, parts), whole, atol=1e-6, rtol=1e-4)
    assert set(whole_loss.terms) == {"mlm", "nsp"}


def test_batch_rows_slices_sparse_positions_consistently(special):
    objective = MaskedLM(special)
    big = objective.make_batch(random_block(special, 6, 24, seed=4), seeded(5))
    parts = [big.rows(0, 2), big.rows(2, 6)]
    for part in parts:
        targets = part.targets.reshape(-1)
        assert torch.equal(part.predict_at["mlm"].flat, (targets != -100).nonzero().squeeze(1))
    assert sum(len(p.predict_at["mlm"].flat) for p in parts) == len(big.predict_at["mlm"].flat)
