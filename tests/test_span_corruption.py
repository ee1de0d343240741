"""T5 span corruption: T5's counting rules, reassembly, density."""

import pytest
import torch

from lmlab.objectives import IGNORE_INDEX, SpanCorruption, SpecialTokens
from lmlab.objectives.span_corruption import (
    corrupt_spans,
    longest_source,
    noise_mask,
    random_segmentation,
    span_counts,
)
from tests.conftest import random_block, seeded


def spans_of(noise: torch.Tensor) -> list[tuple[bool, int]]:
    """Run-length encoding: [(is_noise, length), ...]."""
    runs: list[tuple[bool, int]] = []
    for flag in noise.tolist():
        if runs and runs[-1][0] == flag:
            runs[-1] = (flag, runs[-1][1] + 1)
        else:
            runs.append((flag, 1))
    return runs


@pytest.mark.parametrize("length", [2, 5, 10, 17, 100, 511, 512])
@pytest.mark.parametrize("density,mean", [(0.15, 3.0), (0.5, 3.0), (0.15, 8.0), (0.5, 32.0)])
def test_the_mask_holds_the_counted_noise_in_alternating_spans(length, density, mean):
    noise_tokens, noise_spans = span_counts(length, density, mean)
    mask = noise_mask(length, density, mean, seeded(length))
    runs = spans_of(mask)
    assert int(mask.sum()) == noise_tokens
    assert [flag for flag, _ in runs] == [False, True] * noise_spans  # keep first, alternate


def test_t5_reference_counts():
    # T5's random_spans_helper for 512-token inputs at density 0.15 and mean span 3 reads
    # 568 raw tokens and gives 114-token targets: 85 noise tokens in 28 spans, so inputs are
    # 568 - 85 + 28 sentinels + [EOS] = 512 and targets 85 + 28 sentinels + [EOS] = 114.
    assert span_counts(568, 0.15, 3.0) == (85, 28)
    special = SpecialTokens.layout(vocab_size=1000, n_sentinels=100)
    source = torch.arange(568) + 200  # ordinary ids, above the sentinels
    for seed in range(5):
        noise = noise_mask(568, 0.15, 3.0, seeded(seed))
        inputs, targets = corrupt_spans(source, noise, special.sentinels, special.eos)
        assert (len(inputs), len(targets)) == (512, 114)


def test_counts_at_t5s_clamps_and_ties():
    # T5 takes at least one noise token and at most length - 1, at least one span, and
    # rounds half to even (tf.round, like Python's round): 2.5 → 2.
    assert span_counts(2, 0.15, 3.0) == (1, 1)
    assert span_counts(10, 0.99, 9.0) == (9, 1)
    assert span_counts(5, 0.5, 1.0) == (2, 2)
    assert span_counts(30, 0.5, 6.0) == (15, 2)
    # Beyond T5: no more spans than kept tokens, as each noise span follows a kept one.
    assert span_counts(10, 0.9, 1.0) == (9, 1)


def test_random_segmentation_is_positive_and_covers_all_items():
    for seed in range(50):
        parts = random_segmentation(20, 6, seeded(seed))
        assert len(parts) == 6 and int(parts.sum()) == 20 and int(parts.min()) >= 1


def test_inputs_and_targets_reassemble_the_original(special):
    sentinels = special.sentinels
    for seed in range(100):
        tokens = random_block(special, 1, 60, seed)[0]
        noise = noise_mask(len(tokens), 0.15, 3.0, seeded(seed))
        inputs, targets = corrupt_spans(tokens, noise, sentinels, special.eos)
        assert inputs[-1] == targets[-1] == special.eos
        spans: dict[int, list[int]] = {}
        current = None
        for token in targets[:-1].tolist():
            if token in sentinels:
                current = token
                spans[current] = []
            else:
                spans[current].append(token)
        rebuilt = []
        for token in inputs[:-1].tolist():
            rebuilt.extend(spans[token] if token in sentinels else [token])
        assert rebuilt == tokens.tolist()
        assert list(spans) == list(sentinels[: len(spans)])  # unique, in order


def test_density_over_many_samples_matches(special):
    counts = torch.zeros(97)
    samples = 2000
    for seed in range(samples):
        counts += noise_mask(97, 0.15, 3.0, seeded(seed)).float()
    assert counts.sum() == 15 * samples  # 97 × 0.15 = 14.55 noise tokens, rounded: 15 each
    # noise lands everywhere but the first position (T5 always opens with kept tokens)
    assert counts[0] == 0 and (counts[1:] > 0).all()
    assert counts[10:-10].std() / counts[10:-10].mean() < 0.15


def test_batch_is_a_prefix_lm_over_inputs_then_targets(special):
    tokens = random_block(special, 4, 64, seed=3)
    tokens[2, 40:] = special.pad
    batch = SpanCorruption(special).make_batch(tokens, seeded(4))
    assert batch.mask.kind == "prefix"
    for row in range(4):
        prefix = int(batch.mask.prefix_len[row])
        ids = batch.input_ids[row]
        assert ids[prefix - 1] == special.eos and ids[prefix] == special.sentinels[0]
        targets = batch.targets[row]
        assert (targets[: prefix - 1] == IGNORE_INDEX).all()
        real = targets != IGNORE_INDEX
        # each target is the next input token: generation continues the sequence
        assert torch.equal(targets[:-1][real[:-1]], ids[1:][real[:-1]])
        length = int((ids != special.pad).sum())
        assert length <= 64 and int(real.sum()) == length - prefix
    source_len = longest_source(64, 0.15, 3.0)
    assert source_len + 2 * span_counts(source_len, 0.15, 3.0)[1] + 2 <= 64


def test_too_few_sentinels_is_a_clear_error(special):
    few = SpecialTokens.layout(vocab_size=400, n_sentinels=2)
    with pytest.raises(ValueError, match="sentinels"):
        SpanCorruption(few).make_batch(random_block(few, 1, 128), seeded(0))
