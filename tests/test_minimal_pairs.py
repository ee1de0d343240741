"""Minimal pairs: accuracy from injected scores and from a hand-built model whose preferences
are known; ties count as wrong; grouping; one-line errors naming file and line."""

import gzip
import json
import math

import numpy as np
import pytest
import torch

from lmlab.data.errors import DataError
from lmlab.eval.minimal_pairs import minimal_pair_accuracy, read_minimal_pairs
from lmlab.eval.perplexity import bits_per_byte, text_metrics
from lmlab.eval.rules import MaskedScoring, NextTokenScoring
from lmlab.eval.scoring import score_documents
from lmlab.eval.texts import EvalText
from lmlab.objectives import SpecialTokens
from tests.eval_models import favouring_model, uniform_model

SPECIAL = SpecialTokens.layout(vocab_size=60, n_sentinels=2)
FAVOURED = 40


def write_pairs(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def pair(good, bad, **extra):
    return {"sentence_good": good, "sentence_bad": bad, **extra}


def test_accuracy_counts_strict_wins_and_ties_as_wrong(tmp_path):
    write_pairs(tmp_path / "agreement.jsonl", [
        pair("a", "b", field="morphology"), pair("c", "d", field="morphology"),
        pair("e", "f", field="syntax"), pair("a", "g", field="syntax")])
    scores = {"a": -1.0, "b": -2.0, "c": -3.0, "d": -1.0, "e": -5.0, "f": -5.0, "g": -0.5}
    asked = []

    def score(sentences):
        asked.append(sentences)
        return np.array([scores[s] for s in sentences])

    result = minimal_pair_accuracy(read_minimal_pairs([tmp_path]), score)
    assert (result["correct"], result["ties"], result["pairs"]) == (1, 1, 4)
    assert result["accuracy"] == 0.25
    assert result["groups"]["field"]["morphology"]["accuracy"] == 0.5
    assert result["groups"]["field"]["syntax"] == {"pairs": 2, "correct": 0, "ties": 1,
                                                   "accuracy": 0.0}
    assert result["groups"]["file"]["agreement"]["pairs"] == 4
    assert asked == [["a", "b", "c", "d", "e", "f", "g"]]  # each sentence scored once


def test_uid_grouping_only_where_it_is_not_the_file_name(tmp_path):
    write_pairs(tmp_path / "island.jsonl", [pair("a", "b", UID="island")])
    assert set(read_minimal_pairs([tmp_path / "island.jsonl"])[0].groups) == {"file"}
    write_pairs(tmp_path / "mixed.jsonl", [pair("a", "b", UID="x"), pair("c", "d", UID="y")])
    assert read_minimal_pairs([tmp_path / "mixed.jsonl"])[1].groups == {"file": "mixed", "UID": "y"}
    chosen = read_minimal_pairs([tmp_path / "mixed.jsonl"], group_by=["UID"])
    assert [p.groups for p in chosen] == [{"UID": "x"}, {"UID": "y"}]


def test_compressed_pair_files_are_read_and_grouped_by_their_plain_name(tmp_path):
    (tmp_path / "island.jsonl.gz").write_bytes(gzip.compress(
        "".join(json.dumps(r) + "\n" for r in [pair("a", "b"), pair("c", "d")]).encode()))
    (tmp_path / "notes.md").write_text("not pairs")
    pairs = read_minimal_pairs([tmp_path])
    assert [(p.good, p.groups) for p in pairs] == [("a", {"file": "island"}),
                                                   ("c", {"file": "island"})]


@pytest.mark.parametrize("lines,group_by,message", [
    (['{"sentence_good": "a", "sentence_bad": "b"}', '{oops'], None,
     "pairs.jsonl:2: not valid JSON"),
    (['{"sentence_good": "a", "sentence_bad": "b"}', "", '{"sentence_good": "a"}'], None,
     "pairs.jsonl:3: missing 'sentence_bad'"),
    (['["a", "b"]'], None, "pairs.jsonl:1: expected a JSON object"),
    (['{"sentence_good": "a", "sentence_bad": 3}'], None,
     "pairs.jsonl:1: 'sentence_bad' must be a non-empty string"),
    (['{"sentence_good": "a", "sentence_bad": "b"}'], ["paradigm"],
     "pairs.jsonl:1: no 'paradigm' to group by"),
    ([""], None, "pairs.jsonl: no minimal pairs in this file"),
])
def test_bad_pair_files_name_file_and_line(tmp_path, lines, group_by, message):
    (tmp_path / "pairs.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError) as error:
        read_minimal_pairs([tmp_path / "pairs.jsonl"], group_by)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_a_hand_built_model_prefers_the_favoured_token_and_ties_are_wrong(tmp_path):
    model = favouring_model(SPECIAL, FAVOURED)

    def score(sentences):  # "sentences" spell token ids
        ids = [torch.tensor([int(t) for t in s.split()]) for s in sentences]
        return score_documents(model, NextTokenScoring(SPECIAL), ids).log_likelihood

    write_pairs(tmp_path / "known.jsonl", [
        pair("30 40 40", "30 31 32"),  # more favoured tokens: right
        pair("30 41 40", "30 40 40"),  # fewer: wrong
        pair("40 31", "41 31"),  # differs only in the first token, which is given: a tie
        pair("30 31 32", "30 33 34"),  # the same score: a tie
    ])
    result = minimal_pair_accuracy(read_minimal_pairs([tmp_path / "known.jsonl"]), score)
    assert (result["correct"], result["ties"], result["accuracy"]) == (1, 2, 0.25)


def test_bits_per_byte_is_nats_over_ln2_over_bytes():
    assert bits_per_byte(12 * math.log(2), 4) == pytest.approx(3.0)
    assert bits_per_byte(math.log(256) * 10, 10) == pytest.approx(8.0)  # a byte-level uniform


@pytest.mark.parametrize("family,heads,rule,scored", [
    ("gpt2", ("lm",), NextTokenScoring, 7 + 3),  # tokens 2..n and [EOS] of each document
    ("bert", ("mlm",), MaskedScoring, 7 + 3),  # every ordinary token
])
def test_bits_per_byte_by_hand_on_a_uniform_model(family, heads, rule, scored):
    text = EvalText("hand", [np.arange(20, 27), np.arange(30, 33)], bytes=25)
    metrics = text_metrics(uniform_model(SPECIAL, family, heads), rule(SPECIAL), text)
    nats = scored * math.log(SPECIAL.vocab_size)
    assert metrics["tokens_scored"] == scored
    assert metrics["nats"] == pytest.approx(nats, rel=1e-6)
    assert metrics["perplexity"] == pytest.approx(SPECIAL.vocab_size, rel=1e-6)
    assert metrics["bits_per_byte"] == pytest.approx(nats / math.log(2) / 25, rel=1e-6)
