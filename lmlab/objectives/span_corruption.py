"""T5 span corruption (Raffel et al. 2020), run as a prefix LM on the shared backbone.

The corrupted input (noise spans replaced by unique sentinels) is a bidirectional prefix; the
sentinel-delimited targets follow it and are generated causally. Counting follows T5 exactly:
noise tokens = round(length × density) (at least 1, at most length − 1), spans =
round(noise / mean span length) (at least 1), and the sequence alternates non-noise / noise
segments starting with non-noise, each segmentation uniform over positive compositions.
"""

from __future__ import annotations

from functools import lru_cache

import torch
from torch import Tensor

from lmlab.data.special_tokens import SENTINELS, SpecialTokens
from lmlab.model.masks import MaskSpec
from lmlab.model.selectors import Positions
from lmlab.objectives.base import Objective
from lmlab.objectives.batch import Batch
from lmlab.objectives.documents import block_pad_id
from lmlab.objectives.losses import IGNORE_INDEX
from lmlab.objectives.traits import Traits


def span_counts(length: int, noise_density: float, mean_span_length: float) -> tuple[int, int]:
    """(noise tokens, noise spans) for a sequence of `length` tokens, by T5's rules."""
    noise = min(max(round(length * noise_density), 1), length - 1)
    spans = max(round(noise / mean_span_length), 1)
    return noise, min(spans, noise, length - noise)


def random_segmentation(items: int, segments: int, generator: torch.Generator) -> Tensor:
    """Split `items` into `segments` positive lengths, uniformly over all such splits."""
    cuts = torch.randperm(items - 1, generator=generator)[: segments - 1] + 1
    bounds = torch.cat((torch.tensor([0]), cuts.sort().values, torch.tensor([items])))
    return bounds.diff()


def noise_mask(length: int, noise_density: float, mean_span_length: float,
               generator: torch.Generator) -> Tensor:
    """Boolean (length,): True on noise tokens, in alternating non-noise / noise spans."""
    noise, spans = span_counts(length, noise_density, mean_span_length)
    noise_lengths = random_segmentation(noise, spans, generator)
    keep_lengths = random_segmentation(length - noise, spans, generator)
    interleaved = torch.stack((keep_lengths, noise_lengths), dim=1).reshape(-1)
    is_noise = torch.tensor([False, True]).repeat(spans)
    return torch.repeat_interleave(is_noise, interleaved)


def corrupt_spans(tokens: Tensor, noise: Tensor, sentinels: tuple[int, ...],
                  eos: int) -> tuple[Tensor, Tensor]:
    """(inputs, targets) for a 1-D `tokens`: noise span k becomes sentinel k in the inputs;
    the targets are each sentinel followed by the span it replaced; both end with `eos`."""
    span_starts = noise & ~torch.cat((torch.tensor([False]), noise[:-1]))
    span_index = (torch.cumsum(span_starts.long(), 0) - 1).clamp(min=0)
    sentinel_ids = torch.tensor(sentinels)[span_index]
    inputs = torch.where(span_starts, sentinel_ids, tokens)[~noise | span_starts]
    # Row-major over (sentinel, token) pairs: a span's sentinel is emitted just before it.
    pairs = torch.stack((sentinel_ids, tokens), dim=1)
    targets = pairs[torch.stack((span_starts, noise), dim=1)]
    end = torch.tensor([eos])
    return torch.cat((inputs, end)), torch.cat((targets, end))


@lru_cache(maxsize=64)
def longest_source(block_len: int, noise_density: float, mean_span_length: float) -> int:
    """The most source tokens whose corrupted inputs + targets (+2 EOS) fit in `block_len`."""
    for length in range(block_len, 1, -1):
        _, spans = span_counts(length, noise_density, mean_span_length)
        if length + 2 * spans + 2 <= block_len:
            return length
    raise ValueError(f"a block of {block_len} tokens is too short for span corruption")


class SpanCorruption(Objective):
    """Before / after (noise density 0.5, mean span length 2: 3 noise tokens in 2 spans;
    sentinels `<0>`, `<1>`; `|` = [EOS]):

        tokens  a b c d e f
        prefix  a <0> d e <1> |          (bidirectional)
        suffix  <0> b c <1> f |          (generated causally; loss here)

    The row is prefix + suffix, right-padded to the block length; the source is cut so both
    fit. UL2-style denoisers are this class with other densities and span lengths.
    """

    name = "span"
    predicts_at_targets = True
    title = "span corruption (span)"
    traits = Traits(attention="prefix", heads=("lm",), scoring="pseudo-span", generation="infill",
                    needs=("pad", "eos", SENTINELS))

    def __init__(self, special: SpecialTokens, noise_density: float = 0.15,
                 mean_span_length: float = 3.0) -> None:
        if not 0.0 < noise_density < 1.0:
            raise ValueError(f"noise_density must be in (0, 1), got {noise_density}")
        if mean_span_length < 1:
            raise ValueError(f"mean_span_length must be >= 1, got {mean_span_length}")
        special.require_all(self.traits.needs, self.title)
        self.special = special
        self.noise_density, self.mean_span_length = noise_density, mean_span_length

    def predicted_fraction(self, rows: int, seq_len: int) -> float:
        """T5's target length — noise tokens, one sentinel per span and [EOS] — for the
        longest source that fits a row, over the row's length."""
        source_len = longest_source(seq_len, self.noise_density, self.mean_span_length)
        noise, spans = span_counts(source_len, self.noise_density, self.mean_span_length)
        return (noise + spans + 1) / seq_len

    def make_batch(self, tokens: Tensor, generator: torch.Generator, step: int = 0) -> Batch:
        batch, block_len = tokens.shape
        source_len = longest_source(block_len, self.noise_density, self.mean_span_length)
        _, max_spans = span_counts(source_len, self.noise_density, self.mean_span_length)
        if max_spans > len(self.special.sentinels):
            raise ValueError(f"blocks of {block_len} tokens need {max_spans} sentinels; the "
                             f"vocabulary has {len(self.special.sentinels)}")
        pad = block_pad_id(self.special)
        rows = torch.full_like(tokens, pad)
        targets = torch.full_like(tokens, IGNORE_INDEX)
        prefix_len = torch.zeros(batch, dtype=torch.long)
        for row in range(batch):
            source = tokens[row][tokens[row] != pad][:source_len]
            noise = noise_mask(len(source), self.noise_density, self.mean_span_length, generator)
            inputs, outputs = corrupt_spans(source, noise, self.special.sentinels,
                                            self.special.eos)
            sequence = torch.cat((inputs, outputs))
            rows[row, : len(sequence)] = sequence
            targets[row, len(inputs) - 1: len(sequence) - 1] = outputs
            prefix_len[row] = len(inputs)
        segments = (rows != pad).long()
        return Batch(
            input_ids=rows, mask=MaskSpec("prefix", prefix_len=prefix_len, segment_ids=segments),
            positions=torch.arange(block_len).expand(batch, block_len), targets=targets,
            predict_at={"lm": Positions.where(targets != IGNORE_INDEX)},
        )
