"""Exact outputs of the random objectives for one fixed input and seed, in the style of seqio's
preprocessor tests: any change to what they draw, or in what order, shows up here.

Each expected batch was checked by hand against the objective's rules (see the comments)."""

import torch

from lmlab.objectives import (
    IGNORE_INDEX,
    MaskedLM,
    MaskedLMWithNSP,
    PrefixLM,
    SpanCorruption,
    SpecialTokens,
)

# [PAD] 0, [UNK] 1, [CLS] 2, [SEP] 3, [MASK] 4, [BOS] 5, [EOS] 6, sentinels 7-11, words 12-59
SPECIAL = SpecialTokens.layout(vocab_size=60, n_sentinels=5)
PAD, CLS, SEP, MASK, EOS = 0, 2, 3, 4, 6
S0, S1 = 7, 8  # the first two sentinels
_ = IGNORE_INDEX


def block(*rows: list[int], length: int) -> torch.Tensor:
    return torch.tensor([row + [PAD] * (length - len(row)) for row in rows])


def seed_0() -> torch.Generator:
    return torch.Generator().manual_seed(0)


def test_span_corruption():
    tokens = block(list(range(12, 28)), list(range(30, 40)), length=16)
    batch = SpanCorruption(SPECIAL, noise_density=0.3, mean_span_length=2.0).make_batch(
        tokens, seed_0())
    # 16-token blocks take 10 source tokens: 3 noise tokens in 2 spans (10 + 2·2 + 2 EOS = 16).
    # Row 0 drops 16 and 20 21; row 1 drops 32 33 and 39 (a span may end the source).
    assert batch.input_ids.tolist() == [
        [12, 13, 14, 15, S0, 17, 18, 19, S1, EOS, S0, 16, S1, 20, 21, EOS],
        [30, 31, S0, 34, 35, 36, 37, 38, S1, EOS, S0, 32, 33, S1, 39, EOS],
    ]
    # the corrupted source is the bidirectional prefix; each suffix token is a target
    assert batch.mask.kind == "prefix" and batch.mask.prefix_len.tolist() == [10, 10]
    assert batch.targets.tolist() == [
        [_, _, _, _, _, _, _, _, _, S0, 16, S1, 20, 21, EOS, _],
        [_, _, _, _, _, _, _, _, _, S0, 32, 33, S1, 39, EOS, _],
    ]
    assert batch.mask.segment_ids.tolist() == [[1] * 16, [1] * 16]


def test_prefix_lm():
    tokens = block([12, 13, 14, 15, EOS, 16, 17, 18, 19, 20, 21, EOS],
                   [22, 23, 24, 25, 26, 27, 28, EOS], length=12)
    batch = PrefixLM(SPECIAL).make_batch(tokens, seed_0())
    assert torch.equal(batch.input_ids, tokens)
    # splits drawn from [1, 11] and [1, 7]: the real tokens less one
    assert batch.mask.kind == "prefix" and batch.mask.prefix_len.tolist() == [11, 5]
    # targets from the last prefix position on, never across a document's [EOS] or into padding
    assert batch.targets.tolist() == [
        [_, _, _, _, _, _, _, _, _, _, EOS, _],
        [_, _, _, _, 27, 28, EOS, _, _, _, _, _],
    ]
    assert batch.mask.segment_ids.tolist() == [[1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2],
                                               [1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0]]
    assert batch.positions[0].tolist() == [0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 5, 6]


def test_masked_lm_with_nsp():
    tokens = block([12, 13, 14, SEP, 15, 16, SEP, 17, 18, 19],
                   [20, 21, 22, 23, SEP, 24, 25, 26, SEP, 27, 28],
                   [30, 31, SEP, 32, 33, 34, SEP, 35, 36],
                   list(range(40, 50)),  # one sentence: halved into 40-44 and 45-49
                   length=16)
    batch = MaskedLMWithNSP(MaskedLM(SPECIAL, rate=0.3)).make_batch(tokens, seed_0())
    # Before masking, the pairs [CLS] A [SEP] B [SEP] are
    #   A = 12 13 14            B = 40-49 from row 3            NotNext
    #   A = 20-23 24-26         B = 45-49 from row 3            NotNext
    #   A = 30 31 32 33 34      B = 27 28 from row 1            NotNext
    #   A = 40-44               B = 45-49, its own next half    IsNext
    assert batch.extras["nsp_label"].tolist() == [1, 1, 1, 0]
    assert batch.token_type_ids.tolist() == [
        [0] * 5 + [1] * 11,
        [0] * 9 + [1] * 6 + [0],
        [0] * 7 + [1] * 3 + [0] * 6,
        [0] * 7 + [1] * 6 + [0] * 3,
    ]
    # then MLM selects 40 48 49 | 21-25 47 49 | 31 | 46: row 1's 25 is kept, row 0's 49 → 35
    # and row 3's 46 → 42 are random replacements, the rest [MASK]; [CLS] and [SEP] never
    assert batch.input_ids.tolist() == [
        [CLS, 12, 13, 14, SEP, MASK, 41, 42, 43, 44, 45, 46, 47, MASK, 35, SEP],
        [CLS, 20, MASK, MASK, MASK, MASK, 25, 26, SEP, 45, 46, MASK, 48, MASK, SEP, PAD],
        [CLS, 30, MASK, 32, 33, 34, SEP, 27, 28, SEP, PAD, PAD, PAD, PAD, PAD, PAD],
        [CLS, 40, 41, 42, 43, 44, SEP, 45, 42, 47, 48, 49, SEP, PAD, PAD, PAD],
    ]
    assert batch.targets.tolist() == [
        [_, _, _, _, _, 40, _, _, _, _, _, _, _, 48, 49, _],
        [_, _, 21, 22, 23, 24, 25, _, _, _, _, 47, _, 49, _, _],
        [_, _, 31, _, _, _, _, _, _, _, _, _, _, _, _, _],
        [_, _, _, _, _, _, _, _, 46, _, _, _, _, _, _, _],
    ]
    assert batch.predict_at["mlm"].flat.tolist() == [5, 13, 14, 18, 19, 20, 21, 22, 27, 29, 34,
                                                     56]
    assert batch.predict_at["nsp"] is None
