"""Each objective's batch: inputs, attention policy, targets, heads."""

import pytest
import torch

from lmlab.config.presets import preset
from lmlab.model import LanguageModel
from lmlab.objectives import (
    IGNORE_INDEX,
    Alternating,
    CausalLM,
    MaskedLM,
    MaskedLMWithNSP,
    Mixture,
    PrefixLM,
    SpanCorruption,
)
from lmlab.objectives.mixture import rows_per_objective
from lmlab.objectives.nsp import IS_NEXT, NOT_NEXT
from tests.conftest import random_block, seeded


def test_clm_targets_are_next_tokens_within_each_document(special):
    tokens = torch.tensor([[20, 21, 22, special.eos, 30, 31, special.pad, special.pad]])
    batch = CausalLM(special).make_batch(tokens, seeded())
    assert batch.targets.tolist() == [[21, 22, special.eos, -100, 31, -100, -100, -100]]
    assert batch.mask.kind == "causal"
    assert batch.mask.segment_ids.tolist() == [[1, 1, 1, 1, 2, 2, 0, 0]]
    assert batch.positions.tolist() == [[0, 1, 2, 3, 0, 1, 0, 1]]


def test_clm_on_one_unpadded_document_takes_the_fused_causal_path(special):
    batch = CausalLM(special).make_batch(random_block(special, 2, 8), seeded())
    assert batch.mask.segment_ids is None
    assert batch.mask.sdpa_arguments(8, 8) == (None, True)


def test_prefix_lm_loss_is_on_the_suffix_only(special):
    tokens = random_block(special, 200, 20, seed=1)
    tokens[0, 15:] = special.pad
    batch = PrefixLM(special).make_batch(tokens, seeded(2))
    prefix = batch.mask.prefix_len
    assert batch.mask.kind == "prefix"
    assert 1 <= int(prefix.min()) and int(prefix.max()) <= 19 and int(prefix[0]) <= 14
    assert len(set(prefix.tolist())) > 10  # drawn per row
    index = torch.arange(20)
    has_target = batch.targets != IGNORE_INDEX
    # a target at position i predicts token i+1; the suffix starts at prefix_len
    assert torch.equal(has_target[1:], ((index >= prefix[:, None] - 1) & (index < 19))[1:])
    fixed = PrefixLM(special, prefix_len=5).make_batch(tokens, seeded(2))
    assert fixed.mask.prefix_len[1:].eq(5).all()


def test_nsp_builds_bert_pairs_with_token_types_and_balanced_labels(special):
    tokens = random_block(special, 400, 40, seed=3)
    tokens[:, 10] = tokens[:, 22] = tokens[:, 31] = special.sep  # four sentences a row
    objective = MaskedLMWithNSP(MaskedLM(special, rate=0.0))
    batch = objective.make_batch(tokens, seeded(4))
    labels = batch.extras["nsp_label"]
    assert abs(float((labels == IS_NEXT).float().mean()) - 0.5) < 5 * (0.25 / 400) ** 0.5
    for row in range(20):
        ids, types = batch.input_ids[row], batch.token_type_ids[row]
        real = ids != special.pad
        seps = (ids == special.sep).nonzero().squeeze(1).tolist()
        assert ids[0] == special.cls and len(seps) == 2 and seps[1] == int(real.sum()) - 1
        assert types[: seps[0] + 1].eq(0).all() and types[seps[0] + 1: seps[1] + 1].eq(1).all()
        a, b = ids[1: seps[0]].tolist(), ids[seps[0] + 1: seps[1]].tolist()
        source = tokens[row][tokens[row] != special.sep].tolist()
        joined = a + b
        is_continuation = source[: len(joined)] == joined
        assert is_continuation == (labels[row] == IS_NEXT)
    assert set(objective.heads) == {"mlm", "nsp"}


def test_nsp_loss_reports_both_terms(special):
    tokens = random_block(special, 4, 40, seed=5)
    tokens[:, 20] = special.sep
    objective = MaskedLMWithNSP(MaskedLM(special))
    model = LanguageModel(preset("bert-tiny", special.vocab_size, 64), heads=objective.heads)
    batch = objective.make_batch(tokens, seeded(6))
    loss = objective.loss(model(**batch.model_inputs()), batch)
    assert set(loss.terms) == {"mlm", "nsp"} and int(loss.terms["nsp"][1]) == 4
    assert set(batch.extras["nsp_label"].tolist()) <= {IS_NEXT, NOT_NEXT}


@pytest.mark.parametrize("rows,weights,expected", [
    (16, [1, 15], [1, 15]), (32, [1, 15], [2, 30]), (8, [1, 1, 2], [2, 2, 4]),
    (3, [1, 100], [1, 2]), (10, [1, 1, 1], [4, 3, 3]),
])
def test_rows_are_split_by_weight_with_every_objective_present(rows, weights, expected):
    assert rows_per_objective(rows, weights) == expected


def test_mixture_runs_every_head_in_one_forward_and_pools_targets(special):
    mixture = Mixture([CausalLM(special), MaskedLM(special), PrefixLM(special)], [1, 2, 1])
    model = LanguageModel(preset("modern-tiny", special.vocab_size, 64), heads=mixture.heads)
    tokens = random_block(special, 8, 24, seed=7)
    batch = mixture.make_batch(tokens, seeded(8))
    assert batch.mask.kind == "prefix"
    prefix = batch.mask.prefix_len.tolist()  # rows 2 : 4 : 2 = causal : bidirectional : prefix
    assert prefix[:6] == [0, 0, 24, 24, 24, 24] and all(1 <= p < 24 for p in prefix[6:])
    loss = mixture.loss(model(**batch.model_inputs()), batch)
    loss.mean().backward()
    assert all(p.grad is not None for p in model.parameters())  # every head got a gradient
    (pooled_sum, pooled_count), = loss.terms.values()
    parts = loss.details
    assert set(parts) == {"clm", "mlm", "prefix"}
    assert int(pooled_count) == sum(int(c) for _, c in parts.values())
    torch.testing.assert_close(pooled_sum, sum(s for s, _ in parts.values()))
    clm_rows = CausalLM(special).make_batch(tokens[:2], seeded(0))
    assert int(parts["clm"][1]) == int((clm_rows.targets != IGNORE_INDEX).sum())


def test_gpt_bert_mixture_shares_one_head(special):
    mixture = Mixture([CausalLM(special), MaskedLM(special, next_token=True)], [1, 15])
    assert mixture.heads == ("lm",)
    batch = mixture.make_batch(random_block(special, 16, 32), seeded(9))
    assert batch.mask.prefix_len.tolist() == [0] + [32] * 15


def test_alternating_switches_objective_every_n_steps(special):
    alternating = Alternating([CausalLM(special), MaskedLM(special)], every_steps=3)
    kinds = [alternating.make_batch(random_block(special, 2, 8), seeded(), step=s).mask.kind
             for s in range(7)]
    assert kinds == ["causal"] * 3 + ["bidirectional"] * 3 + ["causal"]
    assert set(alternating.heads) == {"lm", "mlm"}


def test_objectives_are_pure_functions_of_ids_and_generator(special):
    tokens = random_block(special, 4, 32, seed=10)
    tokens[:, 16] = special.sep
    for objective in (MaskedLM(special), PrefixLM(special), SpanCorruption(special),
                      MaskedLMWithNSP(MaskedLM(special))):
        torch.manual_seed(123)  # global RNG must not matter
        first = objective.make_batch(tokens.clone(), seeded(11))
        torch.manual_seed(456)
        second = objective.make_batch(tokens.clone(), seeded(11))
        assert torch.equal(first.input_ids, second.input_ids)
        assert torch.equal(first.targets, second.targets)


@pytest.mark.parametrize("make", [
    lambda s: MaskedLM(s), lambda s: CausalLM(s), lambda s: PrefixLM(s),
    lambda s: SpanCorruption(s), lambda s: MaskedLMWithNSP(MaskedLM(s)),
    lambda s: Mixture([CausalLM(s), MaskedLM(s)], [1, 3]),
    lambda s: Alternating([CausalLM(s), MaskedLM(s)], 1),
])
def test_target_counts_known_before_the_forward_equal_the_loss_counts(special, make):
    objective = make(special)
    tokens = random_block(special, 8, 32, seed=12)
    tokens[:, 11] = special.sep
    model = LanguageModel(preset("bert-tiny", special.vocab_size, 64), heads=objective.heads)
    batch = objective.make_batch(tokens, seeded(13), step=1)
    loss = objective.loss(model(**batch.model_inputs()), batch)
    counts = objective.target_counts(batch)
    assert {k: int(v) for k, v in counts.items()} == {k: int(c) for k, (_, c) in loss.terms.items()}
