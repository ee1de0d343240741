"""`lmlab eval --max-tokens N` scores N tokens, not the whole documents they end in: the last
document read is cut at a token, with the bytes (and invalid bytes) of the text it keeps."""

import json
import random

import pytest

from lmlab import load
from lmlab.cli import main
from lmlab.config.training import TrainConfig
from lmlab.data.dataset import in_memory_dataset
from lmlab.data.preparation.tokenizer_training import train_tokenizer
from lmlab.data.tokenizer import special_tokens_of
from lmlab.eval.texts import _take, dataset_text, file_text
from lmlab.train.entry import pretrain

WORDS = ["the", "cat", "dog", "sees", "a", "bird", "runs", "home"]


def text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choices(WORDS, k=words)) + "."


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("run")
    rng = random.Random(0)
    texts = [text(rng, rng.randint(5, 40)) for _ in range(200)]
    tokenizer = train_tokenizer(texts, vocab_size=200, n_sentinels=4)
    ids = [e.ids for e in tokenizer.encode_batch(texts)]
    dataset = in_memory_dataset(ids[:180], ids[180:], special_tokens_of(tokenizer))
    dataset.tokenizer_json = tokenizer.to_str()
    return load(pretrain(TrainConfig(objective="clm", model="gpt2-tiny", out=str(root / "clm"),
                                     seq_len=32, batch_size=4, steps=1, eval_every=1),
                         dataset))


def test_take_cuts_the_last_item_to_the_tokens_left():
    lengths = lambda items: [len(item) for item in items]  # noqa: E731
    items = [[1] * 5, [2] * 5, [3] * 5]
    assert lengths(_take(items, 12)) == [5, 5, 2]
    assert lengths(_take(items, 10)) == [5, 5]
    assert lengths(_take(items, None)) == [5, 5, 5]
    assert lengths(_take(items, 0)) == []


def test_eval_scores_no_more_tokens_than_asked(run, tmp_path, capsys):
    rng = random.Random(1)
    documents = [text(rng, 300) for _ in range(3)]
    data = tmp_path / "long.jsonl"
    data.write_text("".join(json.dumps({"text": d}) + "\n" for d in documents))
    whole = file_text([str(data)], run).documents
    max_tokens = len(whole[0]) + 7  # all of the first document, 7 tokens of the second
    out = tmp_path / "results.json"
    assert main(["eval", str(run.path), "--data", str(data), "--max-tokens", str(max_tokens),
                 "--out", str(out)]) == 0
    assert f"2 documents, {max_tokens:,} tokens" in capsys.readouterr().out
    result = json.loads(out.read_text())
    assert result["data"]["tokens"] == result["perplexity"][0]["tokens_scored"] == max_tokens
    offsets = run.tokenizer.encode(documents[1], add_special_tokens=False).offsets
    kept = documents[0] + documents[1][:offsets[6][1]]
    assert result["data"]["bytes"] == len(kept.encode("utf-8"))


def test_a_cut_keeps_the_invalid_bytes_of_its_text(run, tmp_path):
    data = tmp_path / "raw.txt"
    data.write_bytes(b"the cat \xff sees a bird " + b"the dog runs home " * 50 + b"\xfe.")
    read = file_text([str(data)], run, max_tokens=10)
    assert read.tokens == 10 and read.invalid_utf8_bytes == 1
    ids = file_text([str(data)], run).documents[0]
    assert (read.documents[0] == ids[:10]).all()


def test_a_dataset_split_is_cut_too(run, tmp_path):
    source = tmp_path / "docs.jsonl"
    rng = random.Random(2)
    source.write_text("".join(json.dumps({"text": text(rng, 60)}) + "\n" for _ in range(300)))
    out = tmp_path / "data"
    assert main(["prepare", str(source), "--out", str(out), "--tokenizer",
                 str(run.path / "tokenizer.json"), "--sentinels", "4"]) == 0
    whole = dataset_text(out, "validation", run).documents
    cut = dataset_text(out, "validation", run, max_tokens=len(whole[0]) + 3)
    assert [len(d) for d in cut.documents] == [len(whole[0]), 3]
