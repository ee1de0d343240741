"""The three trained tokenizer kinds: special-token layout, word starts against the
tokenizers' own word_ids, saving and validated loading."""

import json

import numpy as np
import pytest
from tokenizers import Tokenizer, models

from lmlab.data.errors import DataError
from lmlab.data.preparation.sentences import sentence_starts, token_starts
from lmlab.data.preparation.tokenizer_training import sentinel_names, train_tokenizer
from lmlab.data.special_tokens import SpecialTokens
from lmlab.data.tokenizer import SPECIAL_TOKENS, load_tokenizer, special_tokens_of, word_start_table

WORDS = ("photosynthesis bewildered undergraduates notwithstanding meticulous preparation "
         "internationalization decentralization manufacturers competitiveness the a of and "
         "thermodynamically irreversibility spontaneous transformations").split()


def corpus(count=300, seed=0):
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=12)).capitalize() + ". (" + rng.choice(WORDS) +
            ")\n" + " ".join(rng.choice(WORDS, size=6)) + "!" for _ in range(count)]


@pytest.fixture(scope="module", params=["bpe", "wordpiece", "unigram"])
def trained(request):
    return request.param, train_tokenizer(corpus(), vocab_size=300, n_sentinels=5,
                                          kind=request.param)


def test_specials_and_sentinels_sit_at_the_layout_ids(trained):
    kind, tokenizer = trained
    special = special_tokens_of(tokenizer)
    assert special == SpecialTokens.layout(tokenizer.get_vocab_size(), n_sentinels=5)
    # Small corpora may run out of pieces before 300; BPE always keeps the 256 bytes.
    assert 100 < tokenizer.get_vocab_size() <= (300 if kind != "bpe" else 300 + 256)


def test_word_start_table_agrees_with_the_tokenizers_own_words(trained):
    kind, tokenizer = trained
    table = word_start_table(tokenizer)
    multi_piece_words = 0
    for text in corpus(40, seed=1):
        text = text.replace(" a ", " antidecentralization ").replace(" of ", " ofthe ")
        encoding = tokenizer.encode(text)
        words = encoding.word_ids
        for i in range(1, len(words)):
            starts_word = words[i] != words[i - 1]
            multi_piece_words += not starts_word
            if kind == "bpe":
                # Ġ marks a word after a space; punctuation and line starts join the word
                # before, so a word is never split, and every Ġ word is found.
                assert starts_word or not table[encoding.ids[i]], encoding.tokens[i]
                assert table[encoding.ids[i]] == encoding.tokens[i].startswith("Ġ")
            else:
                assert table[encoding.ids[i]] == starts_word, (encoding.tokens[i - 1: i + 1])
    assert multi_piece_words > 100  # words really are split into pieces: not vacuous


def test_sentences_map_to_tokens_of_the_whole_document(trained):
    _, tokenizer = trained
    text = "The bewildered meticulous. Photosynthesis!\nA spontaneous (and) of. Thermodynamically."
    encoding = tokenizer.encode(text, add_special_tokens=False)
    starts = token_starts(encoding, sentence_starts(text))
    cuts = [0, *starts, len(encoding.ids)]
    pieces = [tokenizer.decode(encoding.ids[a:b]).strip()
              for a, b in zip(cuts, cuts[1:], strict=False)]
    assert [p.replace(" ", "") for p in pieces] == \
        ["Thebewilderedmeticulous.", "Photosynthesis!", "Aspontaneous(and)of.",
         "Thermodynamically."]
    lines = sentence_starts("one. two\nthree", "lines")
    assert lines == [len("one. two\n")]


def test_a_saved_tokenizer_loads_and_is_checked(tmp_path, trained):
    _, tokenizer = trained
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    loaded = load_tokenizer(tmp_path / "tokenizer.json", n_sentinels=5)
    assert loaded.encode("photosynthesis").ids == tokenizer.encode("photosynthesis").ids
    with pytest.raises(DataError, match=r"tokenizer.json: has 5 sentinels <extra_id_N>, fewer "
                                        "than the 100 asked for"):
        load_tokenizer(tmp_path / "tokenizer.json", n_sentinels=100)


def test_a_tokenizer_without_mask_is_named(tmp_path):
    vocab = {t: i for i, t in enumerate([s for s in SPECIAL_TOKENS if s != "[MASK]"] + ["a"])}
    Tokenizer(models.WordLevel(vocab, unk_token="[UNK]")).save(str(tmp_path / "t.json"))
    with pytest.raises(DataError, match=r"t.json lacks the special tokens \[MASK\]"):
        load_tokenizer(tmp_path / "t.json")
    (tmp_path / "broken.json").write_text(json.dumps({"model": "nothing"}))
    with pytest.raises(DataError, match="broken.json: not a Hugging Face tokenizer.json"):
        load_tokenizer(tmp_path / "broken.json")
    with pytest.raises(DataError, match="nowhere.json: no such tokenizer file"):
        load_tokenizer(tmp_path / "nowhere.json")
    assert sentinel_names(2) == ["<extra_id_0>", "<extra_id_1>"]
