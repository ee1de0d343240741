"""T5 span corruption: T5's counting rules, reassembly, density."""

import pytest
import torch

from lmlab.objectives import IGNORE_INDEX, SpanCorruption
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
def test_counts_follow_t5_rules_exactly(length, density, mean):
    noise_tokens = min(max(round(length * density), 1), length - 1)
    noise_spans = max(round(noise_tokens / mean), 1)
    assert span_counts(length, density, mean)[0] == noise_tokens
    mask = noise_mask(length, density, mean, seeded(length))
    runs = spans_of(mask)
    assert int(mask.sum()) == noise_tokens
    assert [flag for flag, _ in runs] == [False, True] * (len(runs) // 2)  # keep first, alternate
    assert len(runs) == 2 * min(noise_spans, noise_tokens, length - noise_tokens)


def test_t5_reference_counts():
    # T5 defaults on its 512-token inputs: 77 noise tokens in 26 spans (round-half-even).
    assert span_counts(512, 0.15, 3.0) == (77, 26)
    assert span_counts(114, 0.15, 3.0) == (17, 6)


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
    assert counts.sum() / (97 * samples) == pytest.approx(round(97 * 0.15) / 97)
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
    from lmlab.objectives import SpecialTokens

    few = SpecialTokens.layout(vocab_size=400, n_sentinels=2)
    with pytest.raises(ValueError, match="sentinels"):
        SpanCorruption(few).make_batch(random_block(few, 1, 128), seeded(0))
