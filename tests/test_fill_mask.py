"""Fill-mask: a tiny MLM trained on a cycle ranks the forced token first; masks, batches and
tokenization behave."""

import pytest
import torch

from lmlab import Pretrained, load
from lmlab.config.presets import preset
from lmlab.data.preparation.tokenizer_training import train_tokenizer
from lmlab.data.tokenizer import special_tokens_of
from lmlab.model import LanguageModel
from lmlab.runs.reading import MASK_TEXT, absorb_space_before
from tests.cycle_language import SPECIAL, cycle, train_cycle_run


@pytest.fixture(scope="module")
def cycle_mlm(tmp_path_factory):
    out = train_cycle_run(tmp_path_factory.mktemp("mlm") / "run", "mlm", steps=300,
                          mlm_rate=0.3)
    return load(out, special=SPECIAL)


def masked(ids: list[int], *at: int) -> list[int]:
    return [SPECIAL.mask if i in at else token for i, token in enumerate(ids)]


@pytest.mark.slow
def test_a_tiny_mlm_ranks_the_forced_token_first(cycle_mlm):
    texts = [cycle(start, 12) for start in range(0, 20, 3)]
    positions = [2, 5, 11, 0, 7, 9, 4]
    queries = [masked(text, at) for text, at in zip(texts, positions, strict=True)]
    results = cycle_mlm.fill_mask(queries, top_k=3)
    for text, at, (candidates,) in zip(texts, positions, results, strict=True):
        assert candidates[0].id == text[at]
        assert candidates[0].probability > 0.5
        assert [c.probability for c in candidates] == sorted(
            (c.probability for c in candidates), reverse=True)


@pytest.mark.slow
def test_a_tiny_masked_next_token_model_fills_from_the_position_before(tmp_path):
    out = train_cycle_run(tmp_path / "run", "mntp", steps=300, mlm_rate=0.3)
    mntp = load(out, special=SPECIAL)
    assert mntp.objective.fill_mask_head == ("lm", 1)
    texts = [cycle(start, 12) for start in range(0, 20, 4)]
    positions = [2, 5, 11, 7, 9]
    results = mntp.fill_mask([masked(t, at) for t, at in zip(texts, positions, strict=True)])
    for text, at, (candidates,) in zip(texts, positions, results, strict=True):
        assert candidates[0].id == text[at]
    with pytest.raises(ValueError, match="starts with \\[MASK\\]"):
        mntp.fill_mask(masked(cycle(0, 6), 0))


@pytest.mark.slow
def test_several_masks_in_one_text_are_each_filled(cycle_mlm):
    text = cycle(4, 14)
    masks = cycle_mlm.fill_mask(masked(text, 3, 8, 12), top_k=2)
    assert [mask[0].id for mask in masks] == [text[3], text[8], text[12]]


@pytest.mark.slow
def test_a_text_fills_the_same_alone_and_beside_longer_texts(cycle_mlm):
    short = masked(cycle(1, 6), 2)
    alone = cycle_mlm.fill_mask(short, top_k=4)
    batched = cycle_mlm.fill_mask([masked(cycle(5, 30), 9), short, masked(cycle(9, 3), 1)],
                                  top_k=4, batch_size=2)[1]
    assert [c.id for c in alone[0]] == [c.id for c in batched[0]]
    assert [c.probability for c in alone[0]] == pytest.approx(
        [c.probability for c in batched[0]], abs=1e-5)


@pytest.mark.slow
def test_a_text_without_a_mask_is_a_one_line_error(cycle_mlm):
    with pytest.raises(ValueError, match="text 2 has no \\[MASK\\] token"):
        cycle_mlm.fill_mask([masked(cycle(0, 5), 1), cycle(0, 5)])


def test_a_model_without_a_masked_lm_head_is_refused():
    cfg = preset("gpt2-tiny", vocab_size=SPECIAL.vocab_size, max_seq_len=32)
    pretrained = Pretrained.of(LanguageModel(cfg, ("lm",)), "clm", SPECIAL)
    with pytest.raises(ValueError, match="no masked-LM head"):
        pretrained.fill_mask(masked(cycle(0, 5), 1))


@pytest.fixture(scope="module")
def text_mlm():
    tokenizer = train_tokenizer(["the quick brown fox jumps over the lazy dog"] * 30,
                                vocab_size=300, n_sentinels=0)
    special = special_tokens_of(tokenizer)
    torch.manual_seed(0)
    cfg = preset("bert-tiny", vocab_size=special.vocab_size, max_seq_len=32, dropout=0.0)
    return Pretrained.of(LanguageModel(cfg, ("mlm",)).eval(), "mlm", special, tokenizer)


def test_the_mask_stands_for_a_word_with_its_leading_space(text_mlm):
    tokenizer = text_mlm.tokenizer
    text = "the quick brown [MASK] jumps"
    encoded = tokenizer.encode(absorb_space_before(text, MASK_TEXT))
    assert encoded.tokens == ["the", "Ġquick", "Ġbrown", "[MASK]", "Ġjumps"]
    # Without that, byte-level BPE leaves the space as a token of its own before the mask.
    assert tokenizer.encode(text).tokens[3] == "Ġ"
    (candidates,) = text_mlm.fill_mask(text, top_k=300)
    words = {c.token for c in candidates}
    assert " fox" in words and sum(c.probability for c in candidates) == pytest.approx(1, 1e-4)
