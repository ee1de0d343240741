"""prepare → open: counts per step in meta.json, the two routes, sentence offsets, mixing,
reuse, atomicity and the reading side on a prepared directory."""

import json

import numpy as np
import pytest
from tokenizers import Tokenizer

import lmlab.data
from lmlab.data.errors import DataError
from lmlab.data.loader import BlockBatches
from lmlab.data.preparation import prepare, prepare_documents
from lmlab.data.preparation.cleaning import split_of
from lmlab.objectives.nsp import split_sentences

WORDS = ("the quick brown fox jumps over a lazy dog while seven wizards quietly judge boxes "
         "of pale green glass near old river banks").split()
SMALL = {"vocab_size": 400, "sentinels": 8, "validation_fraction": 0.2}


def sentence(rng):
    return " ".join(rng.choice(WORDS, size=rng.integers(4, 12))).capitalize() + \
        rng.choice([".", "!", "?"])


def documents(count=120, seed=0, sentences=(2, 6)):
    rng = np.random.default_rng(seed)
    return [" ".join(sentence(rng) for _ in range(rng.integers(*sentences)))
            for _ in range(count)]


def write_jsonl(path, texts, field="text"):
    path.write_text("".join(json.dumps({field: t}) + "\n" for t in texts))
    return path


def meta_of(directory):
    return json.loads((directory / "meta.json").read_text())


def test_every_step_is_counted_in_meta_json(tmp_path):
    # 250 documents: bad records must stay under readers.py's 1% tolerance. Long documents, so
    # that one changed word leaves most of near-dedup's 5-word shingles in common.
    texts = documents(250, sentences=(12, 16))
    words = texts[1].split()
    near_copy = " ".join([*words[:10], "zebra", *words[11:]])  # one word changed
    source = tmp_path / "corpus.jsonl"
    lines = [json.dumps({"text": t}) for t in [*texts, texts[0], texts[2], "   ", near_copy]]
    lines.insert(3, "{not json")
    lines.insert(5, json.dumps({"body": "no text field"}))
    source.write_bytes(("\n".join(lines) + "\n").encode() + b'{"text": "bad \xff byte"}\n')
    out = prepare([str(source)], tmp_path / "data", **SMALL)
    meta = meta_of(out)
    assert meta["reading"] == {"files": 1, "documents": 255, "invalid_utf8_documents": 1,
                               "invalid_utf8_bytes": 1,
                               "skipped": {"not_json": 1, "missing_field": 1}}
    cleaning = meta["cleaning"]
    assert (cleaning["empty"], cleaning["exact_duplicates"], cleaning["near_duplicates"]) == \
        (1, 2, 1)
    assert [(r["step"], r["in"], r["out"]) for r in cleaning["steps"]] == [
        ("empty", 255, 254), ("exact_dedup", 254, 252), ("quality", 252, 252),
        ("near_dedup", 252, 251)]
    splits = meta["splits"]
    assert splits["train"]["documents"] + splits["validation"]["documents"] == 251
    assert meta["recipe"]["vocab_size"] == 400 and meta["recipe"]["sources"] == [str(source)]
    histogram = meta["stats"]["tokens_per_document"]
    assert sum(row["documents"] for row in histogram) == 251
    assert meta["stats"]["top_tokens"][0]["count"] >= meta["stats"]["top_tokens"][1]["count"]
    report = (out / "stats.txt").read_text()
    assert "near_dedup" in report and "not json" in report and "most frequent" in report
    assert "quality" in report and "(off)" in report  # Gopher's rules are off by default


def test_prepared_documents_decode_to_the_cleaned_text_in_their_split(tmp_path):
    texts = documents(80)
    dirty = [t.replace("fox", "fo\u0301x\x07", 1) for t in texts]  # NFC changes, control char
    out = prepare_documents(dirty, tmp_path / "data", **SMALL)
    assert sorted(p.name for p in out.iterdir()) == [  # no temporary file left behind
        "meta.json", "stats.txt", "tokenizer.json", "train.documents.npy",
        "train.sentences.npy", "train.tokens.bin", "validation.documents.npy",
        "validation.sentences.npy", "validation.tokens.bin"]
    dataset = lmlab.data.open_dataset(out)
    tokenizer = Tokenizer.from_str(dataset.tokenizer_json)
    expected = [t.replace("fox", "fóx", 1) for t in texts]
    train = [t for t in expected if split_of(t, 0.2) == "train"]
    spans = dataset.train.document_spans()
    assert len(spans) == len(train)
    decoded = [tokenizer.decode(dataset.train.read(a, b - 1).tolist()) for a, b in spans]
    assert decoded == train
    assert all(dataset.train.read(b - 1, b)[0] == dataset.special.eos for _, b in spans)
    assert dataset.train.tokens.dtype == np.uint16
    assert dataset.special.mask == 4 and len(dataset.special.sentinels) == 8


def test_sentence_offsets_cut_documents_into_their_sentences(tmp_path):
    texts = ["One two three. Four five!\nSix seven? Eight.", "Alpha beta gamma."] * 1 + \
        documents(60, seed=3)
    out = prepare_documents(texts, tmp_path / "data", **SMALL)
    dataset = lmlab.data.open_dataset(out)
    tokenizer = Tokenizer.from_str(dataset.tokenizer_json)
    for source in (dataset.train, dataset.validation):
        documents_ = source.document_spans()
        sentences = source.sentence_spans()
        assert sentences[:, 0].tolist() == sorted(sentences[:, 0].tolist())
        # Sentences tile each document up to its [EOS].
        for start, stop in documents_[:20].tolist():
            inside = sentences[(sentences[:, 0] >= start) & (sentences[:, 1] <= stop)]
            assert inside[0, 0] == start and inside[-1, 1] == stop - 1
            assert (inside[1:, 0] == inside[:-1, 1]).all()
    source = dataset.train if split_of(texts[0], 0.2) == "train" else dataset.validation
    first = next(i for i, (a, b) in enumerate(source.document_spans().tolist())
                 if tokenizer.decode(source.read(a, b - 1).tolist()) == texts[0])
    start, stop = source.document_spans()[first]
    spans = source.sentence_spans()
    spans = spans[(spans[:, 0] >= start) & (spans[:, 1] <= stop)]
    pieces = [tokenizer.decode(source.read(a, b).tolist()).strip() for a, b in spans]
    assert pieces == ["One two three.", "Four five!", "Six seven?", "Eight."]


def test_nsp_sentence_packing_reads_real_sentences_and_old_datasets_say_so(tmp_path):
    out = prepare_documents(documents(100, seed=4), tmp_path / "data", **SMALL)
    dataset = lmlab.data.open_dataset(out)
    special = dataset.special
    batches = BlockBatches(dataset.train, 64, 4, "sentences", special.pad, special.sep)
    tokens = batches.batch(0).tokens
    tokenizer = Tokenizer.from_str(dataset.tokenizer_json)
    for row in tokens:
        parts = split_sentences(row, special.sep, special.pad)
        sentences = [tokenizer.decode(part.tolist()).strip() for part in parts]
        assert len(sentences) > 1
        assert all(s[-1] in ".!?" and s[0].isupper() for s in sentences), sentences
    (out / "train.sentences.npy").unlink()  # what a dataset of format 1 looks like
    old = lmlab.data.open_dataset(out)
    with pytest.raises(DataError, match="no sentence offsets.*prepared again"):
        BlockBatches(old.train, 64, 4, "sentences", special.pad, special.sep)
    BlockBatches(old.train, 64, 4, "concatenate")  # everything else still reads it


def test_a_given_tokenizer_streams_to_the_same_shards_as_training_then_encoding(tmp_path):
    source = write_jsonl(tmp_path / "c.jsonl", documents(120, seed=5))
    trained = prepare([str(source)], tmp_path / "trained", **SMALL)
    given = prepare([str(source)], tmp_path / "given", **{
        **SMALL, "tokenizer": str(trained / "tokenizer.json")})
    for split in ("train", "validation"):
        assert meta_of(given)["splits"][split] == meta_of(trained)["splits"][split]
    assert meta_of(given)["tokenizer"]["kind"] == "given"


def test_weighted_sources_are_mixed_to_the_requested_shares(tmp_path):
    big = write_jsonl(tmp_path / "big.jsonl", documents(150, seed=6))
    small = write_jsonl(tmp_path / "small.jsonl", documents(30, seed=7))
    out = prepare([f"{big}:1", f"{small}:1"], tmp_path / "data", **SMALL)
    mix = {row["source"]: row for row in meta_of(out)["mix"]}
    assert mix[str(big)]["requested_share"] == mix[str(small)]["requested_share"] == 0.5
    assert mix[str(small)]["documents_in"] == 30 and mix[str(small)]["multiplier"] == 3.0
    assert mix[str(small)]["documents_out"] == 90  # up-sampled: each document three times
    assert 0.35 < mix[str(big)]["realised_share"] < 0.65
    assert set(meta_of(out)["cleaning_by_source"]) == {str(big), str(small)}
    with pytest.raises(DataError, match="every source a weight"):
        prepare([f"{big}:1", str(small)], tmp_path / "other", **SMALL)


def test_rerunning_reuses_a_finished_dataset_and_refuses_other_recipes_or_inputs(tmp_path):
    source = write_jsonl(tmp_path / "c.jsonl", documents(60))
    out = prepare([str(source)], tmp_path / "data", **SMALL)
    stamp = (out / "train.tokens.bin").stat().st_mtime_ns
    assert prepare([str(source)], out, **SMALL) == out
    assert (out / "train.tokens.bin").stat().st_mtime_ns == stamp
    with pytest.raises(DataError, match="another recipe"):
        prepare([str(source)], out, **{**SMALL, "vocab_size": 500})
    write_jsonl(source, documents(61))
    with pytest.raises(DataError, match="other versions of the input files"):
        prepare([str(source)], out, **SMALL)


def test_an_interrupted_prepare_leaves_nothing_that_looks_complete(tmp_path):
    def exploding():
        yield from documents(50)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):  # while cleaning into the temporary file
        prepare_documents(exploding(), tmp_path / "data", **SMALL)
    assert list(tmp_path.iterdir()) == []
    given = prepare_documents(documents(60), tmp_path / "given", **SMALL) / "tokenizer.json"
    with pytest.raises(KeyboardInterrupt):  # in the background reader, while encoding
        prepare_documents(exploding(), tmp_path / "data", **{**SMALL, "tokenizer": str(given)})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["given"]


def test_a_recipe_file_gives_the_fields_and_options_override_it(tmp_path):
    source = write_jsonl(tmp_path / "c.jsonl", documents(60), field="body")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(f"sources: [{source}]\ntext_field: body\ntokenizer: wordpiece\n"
                      "vocab_size: 300\nsentinels: 4\nnear_dedup_threshold: null\n")
    out = prepare(None, tmp_path / "data", recipe_file=recipe, vocab_size=350)
    saved = meta_of(out)["recipe"]
    assert (saved["tokenizer"], saved["vocab_size"], saved["near_dedup_threshold"]) == \
        ("wordpiece", 350, None)
    assert meta_of(out)["cleaning"]["steps"][-1] == {"step": "near_dedup", "in": 60, "out": 60}
    recipe.write_text("vocab_sise: 300\n")
    with pytest.raises(DataError, match="'vocab_sise'; did you mean 'vocab_size'"):
        prepare(None, tmp_path / "other", recipe_file=recipe)
