"""MLM corruption statistics, invariants and pinned outputs."""

import math

import pytest
import torch
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

from lmlab.data.tokenizer import word_start_table
from lmlab.objectives import IGNORE_INDEX, LinearRate, MaskedLM, SpecialTokens
from tests.conftest import random_block, seeded


def bert_like_block(special: SpecialTokens, rows: int, length: int, seed: int) -> torch.Tensor:
    """[CLS] text [SEP] text [EOS] [PAD]... with varying padding: every kind of special token."""
    tokens = random_block(special, rows, length, seed)
    tokens[:, 0] = special.cls
    tokens[:, length // 3] = special.sep
    tokens[:, length // 2] = special.eos
    pad_from = torch.randint(length - 20, length + 1, (rows,), generator=seeded(seed + 1))
    tokens[torch.arange(length)[None, :] >= pad_from[:, None]] = special.pad
    return tokens


def within_binomial(successes: int, trials: int, p: float, sds: float = 5.0) -> bool:
    return abs(successes - trials * p) <= sds * math.sqrt(trials * p * (1 - p))


def test_selection_rate_and_80_10_10_split_on_100k_tokens(special):
    tokens = bert_like_block(special, rows=800, length=128, seed=0)
    assert tokens.numel() >= 100_000
    inputs, targets = MaskedLM(special).corrupt(tokens, seeded(1))
    table = special.special_table()
    eligible = ~table[tokens]
    selected = targets != IGNORE_INDEX
    n_eligible, n_selected = int(eligible.sum()), int(selected.sum())
    assert within_binomial(n_selected, n_eligible, 0.15)

    masked = selected & (inputs == special.mask)
    changed = selected & (inputs != special.mask) & (inputs != tokens)
    # a random replacement draws the original token again with probability 1/ordinary
    p_changed = 0.1 * (1 - 1 / len(special.ordinary_ids()))
    assert within_binomial(int(masked.sum()), n_selected, 0.8)
    assert within_binomial(int(changed.sum()), n_selected, p_changed)
    assert within_binomial(int((selected & (inputs == tokens)).sum()), n_selected,
                           1 - 0.8 - p_changed)


def test_special_and_padding_tokens_are_never_selected_or_changed(special):
    tokens = bert_like_block(special, rows=400, length=64, seed=2)
    inputs, targets = MaskedLM(special, rate=0.5).corrupt(tokens, seeded(3))
    is_special = special.special_table()[tokens]
    assert (targets[is_special] == IGNORE_INDEX).all()
    assert torch.equal(inputs[is_special], tokens[is_special])
    replaced = (targets != IGNORE_INDEX) & (inputs != special.mask)
    assert not special.special_table()[inputs[replaced]].any()  # random draws are ordinary


def test_configurable_rate_and_split(special):
    tokens = random_block(special, rows=400, length=128, seed=4)
    objective = MaskedLM(special, rate=0.4, mask_prob=0.5, random_prob=0.0)
    inputs, targets = objective.corrupt(tokens, seeded(5))
    selected = targets != IGNORE_INDEX
    assert within_binomial(int(selected.sum()), tokens.numel(), 0.4)
    assert within_binomial(int((inputs[selected] == special.mask).sum()), int(selected.sum()), 0.5)
    assert torch.equal(inputs[selected & (inputs != special.mask)],
                       tokens[selected & (inputs != special.mask)])  # no random replacement


def test_exact_count_selects_round_rate_times_eligible_per_row(special):
    tokens = bert_like_block(special, rows=200, length=100, seed=6)
    _, targets = MaskedLM(special, selection="exact").corrupt(tokens, seeded(7))
    eligible = (~special.special_table()[tokens]).sum(1)
    expected = [round(0.15 * int(n)) for n in eligible]
    assert (targets != IGNORE_INDEX).sum(1).tolist() == expected


def test_pinned_outputs_for_a_fixed_seed():
    special = SpecialTokens.layout(vocab_size=40)
    tokens = torch.tensor([[2, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 3],
                           [2, 20, 21, 22, 23, 24, 25, 26, 3, 0, 0, 0]])
    batch = MaskedLM(special, rate=0.3).make_batch(tokens, seeded(1234))
    assert batch.input_ids.tolist() == PINNED_INPUTS
    assert batch.targets.tolist() == PINNED_TARGETS
    assert batch.predict_at["mlm"].flat.tolist() == PINNED_PREDICT_AT


PINNED_INPUTS = [[2, 10, 4, 12, 4, 14, 4, 16, 17, 18, 19, 3],
                 [2, 20, 21, 22, 4, 24, 4, 26, 3, 0, 0, 0]]
PINNED_TARGETS = [[-100, -100, 11, -100, 13, -100, 15, -100, -100, -100, -100, -100],
                  [-100, -100, 21, -100, 23, -100, 25, -100, -100, -100, -100, -100]]
PINNED_PREDICT_AT = [2, 4, 6, 14, 16, 18]


def test_rate_schedule_moves_selection_rate(special):
    schedule = LinearRate(0.30, 0.15, steps=1000)
    assert schedule(0) == pytest.approx(0.30)
    assert schedule(500) == pytest.approx(0.225)
    assert schedule(1000) == schedule(5000) == pytest.approx(0.15)
    tokens = random_block(special, rows=400, length=128, seed=8)
    objective = MaskedLM(special, rate=schedule)
    for step, rate in ((0, 0.30), (1000, 0.15)):
        _, targets = objective.corrupt(tokens, seeded(9), step=step)
        assert within_binomial(int((targets != IGNORE_INDEX).sum()), tokens.numel(), rate)


def test_masked_next_token_predicts_each_masked_token_from_the_position_before(special):
    tokens = random_block(special, rows=50, length=64, seed=10)
    shifted = MaskedLM(special, next_token=True)
    assert shifted.heads == ("lm",)
    inputs, targets = shifted.corrupt(tokens, seeded(11))
    assert (inputs[:, 0] == tokens[:, 0]).all()  # the first token is never selected
    selected_next = targets[:, :-1] != IGNORE_INDEX
    assert torch.equal(targets[:, :-1][selected_next], tokens[:, 1:][selected_next])
    assert (targets[:, -1] == IGNORE_INDEX).all()
    batch = shifted.make_batch(tokens, seeded(11))
    assert torch.equal(batch.predict_at["lm"].flat, (batch.targets.reshape(-1) != IGNORE_INDEX)
                       .nonzero().squeeze(1))


# ---- whole-word masking with real tokenizers built here -------------------------------

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[BOS]", "[EOS]"]
TEXT = [
    "The unbelievably extraordinary circumstances surrounding photosynthesis bewildered "
    "undergraduates, (notwithstanding) their characteristically meticulous preparation.",
    "Internationalization and decentralization reshaped manufacturers' competitiveness.",
    "Thermodynamically, irreversibility accompanies spontaneous transformations everywhere.",
]


def wordpiece_tokenizer() -> Tokenizer:
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer()
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.train_from_iterator(TEXT * 5, trainers.WordPieceTrainer(
        vocab_size=120, special_tokens=SPECIALS))
    return tokenizer


def byte_level_bpe_tokenizer() -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    tokenizer.train_from_iterator(TEXT * 5, trainers.BpeTrainer(
        vocab_size=320, special_tokens=SPECIALS, initial_alphabet=alphabet))
    return tokenizer


@pytest.mark.parametrize("build", [wordpiece_tokenizer, byte_level_bpe_tokenizer])
@pytest.mark.parametrize("selection", ["bernoulli", "exact"])
def test_whole_word_masking_never_splits_a_word(build, selection):
    tokenizer = build()
    vocab = tokenizer.get_vocab()
    special = SpecialTokens(tokenizer.get_vocab_size(), *(vocab[t] for t in SPECIALS))
    encodings = [tokenizer.encode(text) for text in TEXT]
    length = max(len(e.ids) for e in encodings) + 2
    rows, word_ids = [], []
    for encoding in encodings:
        ids = [special.cls, *encoding.ids, special.sep]
        rows.append(ids + [special.pad] * (length - len(ids)))
        word_ids.append([None, *encoding.word_ids, None] + [None] * (length - len(ids)))
    tokens = torch.tensor(rows).repeat(100, 1)
    word_ids = word_ids * 100
    objective = MaskedLM(special, rate=0.3, selection=selection, whole_word=True,
                         word_start_table=word_start_table(tokenizer))
    _, targets = objective.corrupt(tokens, seeded(14))
    selected = (targets != IGNORE_INDEX).tolist()
    multi_piece_words_selected = 0
    for row_words, row_selected in zip(word_ids, selected, strict=True):
        by_word: dict[int, set[bool]] = {}
        for word, is_selected in zip(row_words, row_selected, strict=True):
            if word is not None:
                by_word.setdefault(word, set()).add(is_selected)
        assert all(len(flags) == 1 for flags in by_word.values()), "a word was split"
        pieces = {w: row_words.count(w) for w in by_word}
        multi_piece_words_selected += sum(1 for w, f in by_word.items() if f == {True}
                                          and pieces[w] > 1)
    assert multi_piece_words_selected > 50  # the property was exercised, not vacuous
    rate = sum(map(sum, selected)) / int((~special.special_table()[tokens]).sum())
    assert 0.2 < rate < 0.4
