"""Fine-tuning pools as the run records: an imported sentence-transformers model that mean-pools
(all-MiniLM-L6-v2's kind) fine-tunes with mean pooling, not the [CLS] its BERT objective would
suggest, and so does its continuation with `lmlab pretrain --init`; the summary names the pooling
and where it came from. A tiny random BERT saved with hand-written sentence-transformers files;
nothing is downloaded."""

from __future__ import annotations

import json

from lmlab.cli import main
from lmlab.config.training import TrainConfig
from lmlab.export.importer import import_hf
from lmlab.train import entry as pretraining
from tests.test_continued_pretraining import TINY, run_dataset
from tests.test_hf_import import saved_bert
from tests.test_st_pooling import sentence_transformers_dir

ROWS = [(f"{word} text number {i}", label) for i, (word, label) in
        enumerate([("good", "pos"), ("bad", "neg")] * 8)]


def finetuned_pooling(run, data, out, capsys) -> tuple[str, str]:
    """(the pooling config.json records, the line that described the fine-tuning)."""
    capsys.readouterr()
    assert main(["finetune", str(run), "--train", str(data), "--validation", str(data),
                 "--out", str(out), "--steps", "1", "--batch-size", "8"]) == 0
    described = next(line for line in capsys.readouterr().out.splitlines()
                     if line.startswith("fine-tuning"))
    return json.loads((out / "config.json").read_text())["train"]["pooling"], described


def labelled(tmp_path):
    data = tmp_path / "labelled.tsv"
    data.write_text("label\ttext\n" + "".join(f"{label}\t{text}\n" for text, label in ROWS))
    return data


def test_imported_mean_pooling_is_kept_before_and_after_init(tmp_path, capsys):
    sentence_transformers_dir(tmp_path / "hf")
    imported = import_hf(tmp_path / "hf", tmp_path / "imported").out
    data = labelled(tmp_path)
    pooling, described = finetuned_pooling(imported, data, tmp_path / "direct", capsys)
    assert pooling == "mean"
    assert "mean pooling (as the model records)" in described
    continued = pretraining.pretrain(TrainConfig(objective="mlm", init=str(imported),
                                                 out=str(tmp_path / "continued"), **TINY),
                                     run_dataset(imported))
    assert json.loads((continued / "config.json").read_text())["embedding"]["pooling"] == (
        "mean-all")
    pooling, described = finetuned_pooling(continued, data, tmp_path / "after", capsys)
    assert pooling == "mean"
    assert "mean pooling (as the model records)" in described


def test_an_explicit_pooling_wins_and_a_plain_bert_keeps_its_objective_default(tmp_path,
                                                                               capsys):
    sentence_transformers_dir(tmp_path / "hf")
    imported = import_hf(tmp_path / "hf", tmp_path / "imported").out
    data = labelled(tmp_path)
    capsys.readouterr()
    assert main(["finetune", str(imported), "--train", str(data), "--validation", str(data),
                 "--out", str(tmp_path / "cls"), "--steps", "1", "--batch-size", "8",
                 "--pooling", "cls"]) == 0
    assert ", cls pooling, " in capsys.readouterr().out
    saved_bert(tmp_path / "plain", class_name="BertModel")  # no sentence-transformers files
    plain = import_hf(tmp_path / "plain", tmp_path / "plain-run").out
    pooling, described = finetuned_pooling(plain, data, tmp_path / "plain-ft", capsys)
    assert pooling == "cls" and "(as the model records)" not in described
