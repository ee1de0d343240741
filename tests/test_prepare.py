"""prepare → open: cleaning counts, split, tokenizer, token streams, atomicity, errors."""

import json

import numpy as np
import pytest
from tokenizers import Tokenizer

from lmlab.data.dataset import open_dataset
from lmlab.data.errors import DataError
from lmlab.data.prepare import digest, in_validation, normalise, prepare
from lmlab.data.tokenizer import SPECIAL_TOKENS, special_tokens_of

WORDS = "the quick brown fox jumps over a lazy dog while seven wizards quietly judge boxes".split()


def documents(count=300, seed=0):
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=rng.integers(5, 40))) + "." for _ in range(count)]


def test_prepare_then_open_round_trips_the_cleaned_text(tmp_path):
    texts = documents()
    dirty = [*texts, texts[0], "   ", "e\u0301t\u00e9\x07 caf\u00e9"]  # a duplicate, an empty
    out = prepare(dirty, tmp_path / "data", vocab_size=500, validation_fraction=0.2)
    meta = json.loads((out / "meta.json").read_text())
    assert meta["cleaning"] == {"documents_in": 303, "empty": 1, "duplicates": 1,
                                "train": meta["cleaning"]["train"],
                                "validation": meta["cleaning"]["validation"]}
    assert meta["cleaning"]["train"] + meta["cleaning"]["validation"] == 301
    assert 0.1 < meta["cleaning"]["validation"] / 301 < 0.3
    dataset = open_dataset(out)
    assert dataset.special.mask == 4 and len(dataset.special.sentinels) == 100
    tokenizer = Tokenizer.from_str(dataset.tokenizer_json)
    train_texts = [t for t in map(normalise, dirty) if t and not in_validation(digest(t), 0.2)]
    spans = dataset.train.document_spans()
    assert len(spans) == meta["splits"]["train"]["documents"]
    first = dataset.train.read(*spans[0])
    assert first[-1] == dataset.special.eos
    assert tokenizer.decode(first[:-1].tolist()) == train_texts[0]
    assert normalise("e\u0301t\x07") == "\u00e9t"  # NFC, control characters stripped
    assert dataset.train.tokens.dtype == np.uint16


def test_rerunning_reuses_a_finished_dataset_and_refuses_another_recipe(tmp_path):
    out = prepare(documents(), tmp_path / "data", vocab_size=500)
    stamp = (out / "train.tokens.bin").stat().st_mtime_ns
    assert prepare(iter(()), out, vocab_size=500) == out  # not even read again
    assert (out / "train.tokens.bin").stat().st_mtime_ns == stamp
    with pytest.raises(DataError, match="another recipe"):
        prepare(documents(), out, vocab_size=600)


def test_an_interrupted_prepare_leaves_nothing_that_looks_complete(tmp_path):
    def exploding():
        yield from documents(50)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        prepare(exploding(), tmp_path / "data", vocab_size=500)
    assert list(tmp_path.iterdir()) == []


def occupied(path):
    (path / "data").mkdir()
    (path / "data" / "notes.txt").write_text("mine")
    return path / "data"


@pytest.mark.parametrize("make,message", [
    (lambda p: prepare(["", "  "], p / "data", vocab_size=500), "empty after cleaning"),
    (lambda p: prepare(documents(), occupied(p), vocab_size=500), "not an lmlab dataset"),
    (lambda p: open_dataset(p / "nowhere"), "does not exist"),
    (lambda p: (p / "half").mkdir() or open_dataset(p / "half"), "no meta.json"),
])
def test_bad_input_is_a_one_line_error(tmp_path, make, message):
    with pytest.raises(DataError, match=message) as error:
        make(tmp_path)
    assert "\n" not in str(error.value)


def test_a_tokenizer_without_mask_is_named(tmp_path):
    from tokenizers import models

    tokenizer = Tokenizer(models.WordLevel({t: i for i, t in enumerate(
        [s for s in SPECIAL_TOKENS if s != "[MASK]"] + ["a"])}, unk_token="[UNK]"))
    with pytest.raises(DataError, match=r"my/tokenizer.json lacks the special tokens \[MASK\]"):
        special_tokens_of(tokenizer, "my/tokenizer.json")
