"""An imported sentence-transformers model embeds as its makers defined: the pooling of
1_Pooling/config.json over every token the model read ([CLS] and [SEP] included), the
Normalize module, the max_seq_length cut, by default in `lmlab embed`, `embed()` and the
server, with explicit options still overriding; what lmlab does not compute is noted, and a
broken modules.json is refused.

A tiny BERT saved by transformers with hand-written sentence-transformers files; nothing is
downloaded.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from lmlab.cli import main
from lmlab.export.importer import import_hf
from lmlab.infer.embed import embed
from lmlab.runs.run import load_run
from lmlab.serve.features import embed as served_embed
from lmlab.serve.runs import ServedRun
from tests.test_hf_import import TOLERANCE, refused, saved_bert, transformers

TEXTS = ["Paris is the capital of France.", "The quick brown fox jumps.",
         "A language model reads text and predicts the words it cannot see."]
MEAN_NORMALIZED = [("sentence_transformers.models.Transformer", ""),
                   ("sentence_transformers.models.Pooling", "1_Pooling"),
                   ("sentence_transformers.models.Normalize", "2_Normalize")]


def sentence_transformers_dir(directory, modules=MEAN_NORMALIZED, max_seq_length=None,
                              **pooling):
    """A tiny BertModel with the files sentence-transformers saves beside it."""
    model = saved_bert(directory, "BertModel")
    (directory / "modules.json").write_text(json.dumps(
        [{"idx": i, "name": str(i), "path": path, "type": kind}
         for i, (kind, path) in enumerate(modules)]))
    (directory / "1_Pooling").mkdir()
    (directory / "1_Pooling" / "config.json").write_text(json.dumps(
        pooling or {"word_embedding_dimension": 32, "pooling_mode_cls_token": False,
                    "pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": False,
                    "pooling_mode_mean_sqrt_len_tokens": False}))
    (directory / "2_Normalize").mkdir()
    if max_seq_length:
        (directory / "sentence_bert_config.json").write_text(json.dumps(
            {"max_seq_length": max_seq_length, "do_lower_case": False}))
    return model


@torch.no_grad()
def defined(directory, model, texts=TEXTS, max_length=None) -> torch.Tensor:
    """The definition computed with transformers: mean of the last hidden states over every
    attended token, special ones included, then L2-normalised."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    encoded = tokenizer(texts, padding=True, truncation=max_length is not None,
                        max_length=max_length, return_tensors="pt")
    hidden = model(**encoded).last_hidden_state
    weights = encoded["attention_mask"].unsqueeze(-1).float()
    return torch.nn.functional.normalize((hidden * weights).sum(1) / weights.sum(1), dim=-1)


def imported(tmp_path, capsys) -> tuple[int, str, str]:
    capsys.readouterr()  # what saving the HF model printed
    code = main(["import", str(tmp_path / "hf"), "--out", str(tmp_path / "run")])
    out, err = capsys.readouterr()
    return code, out, err


def test_lmlab_embed_equals_mean_over_every_token_then_normalised(tmp_path, capsys):
    model = sentence_transformers_dir(tmp_path / "hf")
    code, out, _ = imported(tmp_path, capsys)
    assert code == 0 and "mean-all pooling, normalised" in out
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["embedding"] == {"pooling": "mean-all", "normalize": True}
    assert main(["embed", str(tmp_path / "run"), *TEXTS, "--out",
                 str(tmp_path / "v.npy")]) == 0
    assert "(mean-all pooling, normalised)" in capsys.readouterr().out
    ours = torch.from_numpy(np.load(tmp_path / "v.npy"))
    expected = defined(tmp_path / "hf", model)
    assert float((ours - expected).abs().max()) <= TOLERANCE
    # The text-token mean differs: [CLS] and [SEP] carry weight in the model's definition.
    run = load_run(tmp_path / "run")
    text_only = torch.from_numpy(embed(run, TEXTS, "mean", normalize=True))
    assert float((text_only - expected).abs().max()) > 100 * TOLERANCE


def test_python_and_server_use_the_recorded_pooling_and_options_override(tmp_path):
    model = sentence_transformers_dir(tmp_path / "hf")
    run = load_run(import_hf(tmp_path / "hf", tmp_path / "run").out)
    expected = defined(tmp_path / "hf", model)
    assert float((torch.from_numpy(embed(run, TEXTS)) - expected).abs().max()) <= TOLERANCE
    similarity = torch.tensor(served_embed(ServedRun("st", run), {"texts": TEXTS})["similarity"])
    assert float((similarity - expected @ expected.T).abs().max()) <= TOLERANCE
    raw = embed(run, TEXTS, normalize=False)
    assert not np.allclose(np.linalg.norm(raw, axis=1), 1.0, atol=1e-3)
    np.testing.assert_allclose(raw / np.linalg.norm(raw, axis=1, keepdims=True),
                               expected.numpy(), atol=TOLERANCE)
    cls = embed(run, TEXTS, "cls", normalize=False)
    with torch.no_grad():
        encoded = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")(
            TEXTS, padding=True, return_tensors="pt")
        first = model(**encoded).last_hidden_state[:, 0]
    np.testing.assert_allclose(cls, first.numpy(), atol=TOLERANCE)


def test_texts_are_cut_to_max_seq_length_as_sentence_transformers_cuts_them(tmp_path, capsys):
    model = sentence_transformers_dir(tmp_path / "hf", max_seq_length=8)
    code, out, _ = imported(tmp_path, capsys)
    assert code == 0 and "texts cut to 8 tokens" in out
    run = load_run(tmp_path / "run")
    expected = defined(tmp_path / "hf", model, max_length=8)
    assert float((torch.from_numpy(embed(run, TEXTS)) - expected).abs().max()) <= TOLERANCE


@pytest.mark.parametrize("pooling,recorded", [
    ({"pooling_mode": "cls"}, "cls"),
    ({"pooling_mode_cls_token": True}, "cls"),
    ({"embedding_dimension": 32, "pooling_mode": ["mean"]}, "mean-all"),
])
def test_both_pooling_config_formats_are_read(tmp_path, capsys, pooling, recorded):
    sentence_transformers_dir(tmp_path / "hf", **pooling)
    assert imported(tmp_path, capsys)[0] == 0
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["embedding"]["pooling"] == recorded


@pytest.mark.parametrize("modules,pooling,named", [
    (MEAN_NORMALIZED, {"pooling_mode": "max"}, "it pools with max"),
    (MEAN_NORMALIZED, {"pooling_mode": ["cls", "mean"]}, "concatenates cls + mean pooling"),
    (MEAN_NORMALIZED[:2] + [("sentence_transformers.models.Dense", "2_Dense")], {},
     "Transformer → Pooling → Dense"),
])
def test_what_lmlab_does_not_compute_is_noted_and_defaults_apply(tmp_path, capsys, modules,
                                                                pooling, named):
    sentence_transformers_dir(tmp_path / "hf", modules, **pooling)
    code, _, err = imported(tmp_path, capsys)
    assert code == 0 and named in err and "--pooling mean-all" in err
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert "embedding" not in config
    run = load_run(tmp_path / "run")
    np.testing.assert_array_equal(embed(run, TEXTS), embed(run, TEXTS, "mean-all", False))


def test_a_broken_modules_json_is_refused_with_nothing_written(tmp_path, capsys):
    sentence_transformers_dir(tmp_path / "hf")
    (tmp_path / "hf" / "modules.json").write_text(json.dumps({"type": "Pooling"}))
    assert "expected a list of modules" in refused(tmp_path, capsys)
    (tmp_path / "hf" / "modules.json").write_text(json.dumps(
        [{"type": "x.Transformer", "path": ""}, {"type": "x.Pooling", "path": "../elsewhere"}]))
    assert "is not inside the model directory" in refused(tmp_path, capsys)


def test_sentence_transformers_reads_the_hand_written_folder_as_lmlab_does(tmp_path, capsys):
    """The files above are the layout sentence-transformers itself loads (when installed)."""
    sentence_transformers = pytest.importorskip("sentence_transformers")
    sentence_transformers_dir(tmp_path / "hf", max_seq_length=12)
    assert imported(tmp_path, capsys)[0] == 0
    theirs = sentence_transformers.SentenceTransformer(str(tmp_path / "hf"), device="cpu")
    expected = theirs.encode(TEXTS, convert_to_numpy=True)
    np.testing.assert_allclose(embed(load_run(tmp_path / "run"), TEXTS), expected,
                               atol=TOLERANCE)
