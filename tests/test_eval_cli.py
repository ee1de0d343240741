"""`lmlab eval` and `lmlab.evaluate` on tiny trained runs: every objective's rule reported,
bits per byte from the text's own bytes, JSON written, and one-line errors for bad input."""

import json
import math
import random

import pytest

import lmlab
from lmlab import load
from lmlab.cli import main
from lmlab.config.training import TrainConfig
from lmlab.data.dataset import in_memory_dataset, open_dataset
from lmlab.data.preparation.tokenizer_training import train_tokenizer
from lmlab.data.tokenizer import special_tokens_of
from lmlab.train.entry import pretrain

NOUNS = ["cat", "dog", "bird", "child", "teacher", "farmer"]
VERBS = ["sees", "likes", "finds", "helps"]


def sentences(rng: random.Random, count: int) -> str:
    return " ".join(f"The {rng.choice(NOUNS)} {rng.choice(VERBS)} the {rng.choice(NOUNS)}."
                    for _ in range(count))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Tiny runs trained for a few steps on a toy language, with a real tokenizer."""
    root = tmp_path_factory.mktemp("runs")
    rng = random.Random(0)
    texts = [sentences(rng, rng.randint(1, 6)) for _ in range(300)]
    tokenizer = train_tokenizer(texts, vocab_size=300, n_sentinels=8)
    ids = [e.ids for e in tokenizer.encode_batch(texts)]
    dataset = in_memory_dataset(ids[:260], ids[260:], special_tokens_of(tokenizer))
    dataset.tokenizer_json = tokenizer.to_str()
    made = {}
    for objective, model in [("mlm", "bert-tiny"), ("clm", "gpt2-tiny"),
                             ("mix:prefix=1,span=1", "modern-tiny")]:
        config = TrainConfig(objective=objective, model=model, out=str(root / model), seq_len=32,
                             batch_size=8, steps=2, eval_every=2, log_every=1)
        made[objective] = pretrain(config, dataset)
    return made


@pytest.fixture
def text_files(tmp_path):
    rng = random.Random(1)
    texts = [sentences(rng, 3), sentences(rng, 12), "The bird helps the café owner."]
    (tmp_path / "a.txt").write_text(texts[0])
    (tmp_path / "b.jsonl").write_text("".join(json.dumps({"text": t}) + "\n"
                                              for t in texts[1:]))
    pairs = [{"sentence_good": "The cat sees the dog.", "sentence_bad": "The cat see the dog.",
              "field": "morphology"},
             {"sentence_good": "The dog likes the bird.", "sentence_bad": "The dog the bird.",
              "field": "syntax"}]
    (tmp_path / "pairs.jsonl").write_text("".join(json.dumps(p) + "\n" for p in pairs))
    return tmp_path, sum(len(t.encode("utf-8")) for t in texts)


@pytest.mark.parametrize("objective,rules", [("mlm", ["pseudo"]), ("clm", ["causal"]),
                                             ("mix:prefix=1,span=1", ["prefix", "pseudo-span"])])
def test_eval_reports_each_objectives_rule_and_writes_json(runs, text_files, capsys,
                                                           objective, rules):
    folder, n_bytes = text_files
    out = folder / "results" / "eval.json"
    code = main(["eval", str(runs[objective]), "--data", str(folder / "a.txt"),
                 str(folder / "b.jsonl"), "--pairs", str(folder / "pairs.jsonl"),
                 "--out", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    result = json.loads(out.read_text())
    assert result["data"] == {"source": f"{folder / 'a.txt'} {folder / 'b.jsonl'}",
                              "documents": 3, "tokens": result["data"]["tokens"],
                              "bytes": n_bytes, "invalid_utf8_bytes": 0}
    assert [m["rule"] for m in result["perplexity"]] == rules
    for metrics in result["perplexity"]:
        assert metrics["tokens_scored"] == result["data"]["tokens"]  # n per document
        assert metrics["bits_per_byte"] == pytest.approx(
            metrics["nats"] / math.log(2) / n_bytes)
        assert metrics["perplexity"] == pytest.approx(
            math.exp(metrics["nats"] / metrics["tokens_scored"]))
        assert metrics["description"] in printed
    assert [m["rule"] for m in result["minimal_pairs"]] == rules
    for pairs in result["minimal_pairs"]:
        assert pairs["pairs"] == 2 and set(pairs["groups"]["field"]) == {"morphology", "syntax"}
    assert "minimal pairs: 1 files, 2 pairs" in printed


def test_python_api_matches_and_score_names_the_rule(runs, text_files):
    folder, _ = text_files
    pretrained = load(runs["clm"])
    result = lmlab.evaluate(pretrained, pairs=[folder / "pairs.jsonl"], group_by=["field"])
    assert "perplexity" not in result and result["objective"] == "clm"
    scores = pretrained.score(["The cat sees the dog.", "The cat see the dog."])
    assert scores.rule == "causal" and len(scores.log_likelihood) == 2
    assert (scores.log_likelihood < 0).all()
    ids = pretrained.tokenizer.encode("The cat sees the dog.").ids
    assert pretrained.score([ids]).log_likelihood[0] == scores.log_likelihood[0]
    # one text or one id list alone is one document, not a sequence of characters or ids
    assert pretrained.score("The cat sees the dog.").log_likelihood == scores.log_likelihood[:1]
    assert pretrained.score(ids).log_likelihood == scores.log_likelihood[:1]
    first = result["minimal_pairs"][0]["groups"]["field"]["morphology"]
    assert first["correct"] == int(scores.log_likelihood[0] > scores.log_likelihood[1])
    span = load(runs["mix:prefix=1,span=1"]).score(["The cat sees the dog."], rule="pseudo-span")
    assert span.rule == "pseudo-span" and span.predictions[0] > 0
    with pytest.raises(ValueError, match="has no 'pseudo' scoring; choose prefix, pseudo-span"):
        load(runs["mix:prefix=1,span=1"]).score(["x"], rule="pseudo")


def one_line_error(capsys, args) -> str:
    assert main(args) == 1
    error = capsys.readouterr().err
    assert error.startswith("lmlab: error: ") and error.count("\n") == 1
    return error


def test_bad_input_is_one_line_and_exit_1(runs, text_files, tmp_path, capsys):
    folder, _ = text_files
    run = str(runs["clm"])
    assert "nowhere: no such run directory" in one_line_error(
        capsys, ["eval", str(tmp_path / "nowhere"), "--pairs", str(folder / "pairs.jsonl")])
    (tmp_path / "half").mkdir()
    assert "not an lmlab run (no config.json)" in one_line_error(
        capsys, ["eval", str(tmp_path / "half"), "--pairs", str(folder / "pairs.jsonl")])
    (tmp_path / "half" / "config.json").write_text((runs["clm"] / "config.json").read_text())
    assert "no complete checkpoint" in one_line_error(
        capsys, ["eval", str(tmp_path / "half"), "--pairs", str(folder / "pairs.jsonl")])
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"sentence_good": "a", "sentence_bad": "b"}\n{"sentence_good": "a"\n')
    assert f"{bad}:2: not valid JSON" in one_line_error(capsys, ["eval", run, "--pairs",
                                                                 str(bad)])
    bad.write_text('{"sentence_good": "a", "sentence_bad": "b"}\n{"sentence_good": "a"}\n')
    assert f"{bad}:2: missing 'sentence_bad'" in one_line_error(capsys, ["eval", run,
                                                                         "--pairs", str(bad)])
    assert "needs --data" in one_line_error(capsys, ["eval", run])
    assert "missing.txt: no such file" in one_line_error(
        capsys, ["eval", run, "--data", str(tmp_path / "missing.txt")])
    assert "stride must be between 1 and" in one_line_error(
        capsys, ["eval", run, "--data", str(folder / "a.txt"), "--stride", "0"])


def test_eval_on_a_prepared_dataset_split(runs, tmp_path, capsys):
    rng = random.Random(2)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"text": sentences(rng, rng.randint(2, 8))}) + "\n"
                              for _ in range(200)))
    data = tmp_path / "data"
    assert main(["prepare", str(corpus), "--out", str(data), "--vocab-size", "300",
                 "--validation-fraction", "0.2"]) == 0
    config = TrainConfig(objective="clm", model="gpt2-tiny", out=str(tmp_path / "run"),
                         seq_len=32, batch_size=8, steps=2, eval_every=2)
    run = pretrain(config, open_dataset(data))
    out = tmp_path / "eval.json"
    assert main(["eval", str(run), "--data", str(data), "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    validation = json.loads((data / "meta.json").read_text())["splits"]["validation"]
    assert result["data"]["source"] == f"{data} (validation)"
    assert result["data"]["documents"] == validation["documents"]
    assert result["data"]["bytes"] == validation["bytes"]  # decoding gives back the text
    (causal,) = result["perplexity"]
    assert causal["tokens_scored"] == validation["tokens"] - validation["documents"]  # no EOS
    capsys.readouterr()
    assert "no split 'test'" in one_line_error(
        capsys, ["eval", str(run), "--data", str(data), "--split", "test"])
    assert "tokenised with another tokenizer" in one_line_error(
        capsys, ["eval", str(runs["clm"]), "--data", str(data)])
