"""Training FLOPs per token for every objective, counted by hand on a tiny config: the backbone
is the same for all but masked LM's last block; the share of positions that run the vocabulary
projection differs, and each objective's share is checked against the batches it makes."""

import pytest
import torch

from lmlab.config import ModelConfig
from lmlab.config.objective_options import ObjectiveOptions
from lmlab.kernels.linear_cross_entropy import IGNORE_INDEX
from lmlab.model.flops import flops_per_token, objective_flops_per_token
from lmlab.objectives import SpecialTokens
from lmlab.objectives.mixture import steps_per_part
from lmlab.objectives.registry import build_objective

CFG = ModelConfig(vocab_size=1000, n_layers=2, d_model=64, n_heads=2)  # GELU MLP of 4·64 = 256
T, ROWS = 128, 32
SPECIAL = SpecialTokens.layout(1000, n_sentinels=20)

# Per layer: 6 × (attention 4·64·64 = 16,384 + MLP 2·64·256 = 32,768) = 294,912 for the
# weights, plus 12·64·128 = 98,304 for attention scores and values: 393,216; two layers:
BACKBONE = 786_432
VOCABULARY = 6 * 64 * 1000  # 384,000 for a position that runs the projection


def total(spec: str, options: ObjectiveOptions | None = None, rows: int = ROWS,
          total_steps: int | None = None) -> float:
    objective = build_objective(spec, SPECIAL, options)
    if total_steps is not None:
        objective = objective.for_run(total_steps)
    return flops_per_token(CFG, T, objective.predicted_fraction(rows, T))


def test_the_backbone_and_the_full_projection_by_hand():
    assert flops_per_token(CFG, T, 0.0) == BACKBONE
    assert flops_per_token(CFG, T, 1.0) == BACKBONE + VOCABULARY


@pytest.mark.parametrize("spec,options,expected", [
    # the masking rate: 0.15 × 384,000 = 57,600
    ("mlm", None, 786_432 + 57_600),  # = 844,032
    # a schedule from 0.4 to 0.2 over the run counts its mean rate: 0.3 × 384,000 = 115,200
    ("mlm", ObjectiveOptions(mlm_rate_start=0.4, mlm_rate=0.2), 786_432 + 115_200),
    # every position but the block's last: 127/128 × 384,000 = 381,000
    ("clm", None, 786_432 + 381_000),  # = 1,167,432
    # a drawn split averages 64 of 128: targets on the other 64, 192,000
    ("prefix", None, 786_432 + 192_000),  # = 978,432
    # a fixed prefix of 32: targets on 96 of 128, 288,000
    ("prefix", ObjectiveOptions(prefix_len=32), 786_432 + 288_000),  # = 1,074,432
    # T5's counting: a 114-token source has round(0.15 × 114) = 17 noise tokens in
    # round(17 / 3) = 6 spans; inputs 114 − 17 + 6 + [EOS] = 104 and targets 17 + 6 + [EOS] = 24
    # fill the 128 (115 tokens would need 129); 24/128 × 384,000 = 72,000
    ("span", None, 786_432 + 72_000),  # = 858,432
    # the masked LM's share; the NSP head is not counted
    ("mlm+nsp", None, 786_432 + 57_600),
    # 32 rows split 2 clm + 30 mlm: 2/32 × 381,000 + 30/32 × 57,600 = 23,812.5 + 54,000
    ("mix:clm=1,mlm=15", None, 786_432 + 77_812.5),  # = 864,244.5
    # a run of unknown length: each part half the time, (381,000 + 57,600) / 2 = 219,300
    ("alternate:clm,mlm@1000", None, 786_432 + 219_300),  # = 1,005,732
])
def test_flops_per_token_by_objective(spec, options, expected):
    assert total(spec, options) == pytest.approx(expected, rel=1e-12)


def test_a_masking_schedule_counts_the_same_once_fixed_to_a_run():
    options = ObjectiveOptions(mlm_rate_start=0.4, mlm_rate=0.2)
    assert total("mlm", options, total_steps=1000) == pytest.approx(786_432 + 115_200)


def test_a_mixture_counts_the_rows_each_part_gets():
    # 8 rows split 1 clm + 7 mlm (not 0.5 + 7.5): 1/8 × 381,000 + 7/8 × 57,600 = 47,625 + 50,400
    assert total("mix:clm=1,mlm=15", rows=8) == pytest.approx(786_432 + 98_025)


def test_an_alternation_counts_its_schedule_over_the_run():
    # 1,500 steps switching every 1,000: clm 1,000 steps, mlm 500
    # (2 × 381,000 + 57,600) / 3 = 273,200
    assert total("alternate:clm,mlm@1000", total_steps=1500) == pytest.approx(786_432 + 273_200)


@pytest.mark.parametrize("total_steps,every,parts", [(1500, 1000, 2), (7, 1, 3), (10, 3, 2),
                                                      (2, 5, 3), (100, 7, 4)])
def test_steps_per_part_is_the_schedule_counted_step_by_step(total_steps, every, parts):
    counted = [0] * parts
    for step in range(total_steps):
        counted[(step // every) % parts] += 1  # Alternating.index_at
    assert steps_per_part(total_steps, every, parts) == counted


def random_block(rows: int) -> torch.Tensor:
    """Ordinary tokens only: one document per row, no padding."""
    first = max(SPECIAL.all_ids) + 1
    return torch.randint(first, 1000, (rows, T), generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("spec,options,rows", [
    ("clm", None, 4), ("prefix", ObjectiveOptions(prefix_len=32), 4), ("span", None, 4),
    ("mix:clm=1,prefix=3", ObjectiveOptions(prefix_len=100), 8),
])
def test_the_share_is_the_share_of_positions_with_a_target(spec, options, rows):
    objective = build_objective(spec, SPECIAL, options)
    batch = objective.make_batch(random_block(rows), torch.Generator().manual_seed(1))
    with_target = (batch.targets != IGNORE_INDEX).float().mean().item()
    assert objective.predicted_fraction(rows, T) == pytest.approx(with_target, rel=1e-12)


@pytest.mark.parametrize("spec,options", [("mlm", None), ("prefix", None),
                                          ("mix:clm=1,mlm=15", None)])
def test_a_random_share_is_the_batches_on_average(spec, options):
    objective = build_objective(spec, SPECIAL, options)
    batch = objective.make_batch(random_block(256), torch.Generator().manual_seed(1))
    with_target = (batch.targets != IGNORE_INDEX).float().mean().item()
    assert objective.predicted_fraction(256, T) == pytest.approx(with_target, abs=0.01)


def test_masked_lm_runs_its_last_block_past_attention_at_the_masked_share_only():
    # the last block's output projection and MLP: 6 × (64·64 + 2·64·256) = 221,184 a position
    after_attention = 221_184
    objective = build_objective("mlm", SPECIAL)
    assert objective_flops_per_token(CFG, T, objective, ROWS) == pytest.approx(
        BACKBONE - 0.85 * after_attention + 0.15 * VOCABULARY)
    causal = build_objective("clm", SPECIAL)
    assert objective_flops_per_token(CFG, T, causal, ROWS) == total("clm")


def test_hybrids_count_the_last_block_where_the_model_runs_it():
    masked = build_objective("mntp", SPECIAL).last_block_fraction(ROWS, T)
    # one shared head: its positions are every causal row's and the masked rows' masked ones
    shared = build_objective("mix:clm=1,mntp=3", SPECIAL)
    assert shared.last_block_fraction(ROWS, T) == pytest.approx(0.25 + 0.75 * masked)
    # two heads are asked for in every batch: the block runs everywhere
    for spec in ("mix:clm=1,mlm=3", "alternate:clm,mlm@10"):
        assert build_objective(spec, SPECIAL).last_block_fraction(ROWS, T) == 1.0


@pytest.mark.parametrize("spec,expected", [
    ("mlm", 0.15), ("clm", 127 / 128),
    ("mlm+nsp", 0.15 + 1 / 128),  # each row's next-sentence label besides the masked tokens
    ("rtd", 1.0),  # the discriminator's original-or-replaced at every position
    ("mix:clm=1,mlm=15", 2 / 32 * 127 / 128 + 30 / 32 * 0.15),
])
def test_the_share_with_a_target_is_the_projections_unless_an_objective_learns_elsewhere(
        spec, expected):
    objective = build_objective(spec, SPECIAL)
    assert objective.target_fraction(ROWS, T) == pytest.approx(expected, rel=1e-12)
