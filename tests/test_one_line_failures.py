"""Failures that used to end in tracebacks end in one line and a non-zero exit, with nothing
half-written: a GGUF file cut short, a tracker package that is installed but broken, and bad
input under the datatrove engine (whose tasks' tracebacks stay in their log files)."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from lmlab.cli import main


def error_line(err: str) -> str:
    """The last line of stderr, after any progress bar's carriage returns; it must be the
    only line that is not a progress bar."""
    lines = [line.split("\r")[-1].strip() for line in err.strip().splitlines()]
    lines = [line for line in lines if line]
    assert len(lines) == 1, err
    return lines[0]


@pytest.fixture
def gguf_file(tmp_path):
    gguf = pytest.importorskip("gguf")
    path = tmp_path / "model.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    writer.add_context_length(32)
    writer.add_embedding_length(8)
    writer.add_head_count(2)
    writer.add_tensor("token_embd.weight", np.ones((16, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.mark.parametrize("kept", [40, 400])  # within the header; within the weights
def test_a_gguf_file_cut_short_is_one_line(gguf_file, tmp_path, capsys, kept):
    cut = tmp_path / "cut.gguf"
    whole = gguf_file.read_bytes()
    cut.write_bytes(whole[:kept])
    capsys.readouterr()
    assert main(["import", str(cut), "--out", str(tmp_path / "run")]) == 1
    line = error_line(capsys.readouterr().err)
    if kept == 40:  # no tensor table to size the file by
        assert line.startswith(f"lmlab: error: {cut}: transformers cannot read this GGUF file (")
    else:
        assert line == (f"lmlab: error: {cut} is truncated: its header describes "
                        f"{len(whole):,} bytes, the file has {kept} (copy or download it again)")
    assert not (tmp_path / "run").exists()


@pytest.fixture
def broken_wandb(tmp_path, monkeypatch):
    """A wandb package that is installed but fails to import, as a half-upgraded one does."""
    package = tmp_path / "site" / "wandb"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        "from wandb.sdk import wandb_init  # a module the upgrade did not install\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    for name in [name for name in sys.modules if name.split(".")[0] == "wandb"]:
        monkeypatch.delitem(sys.modules, name)


def test_a_broken_tracker_package_is_one_line_before_the_run_directory(broken_wandb, tmp_path,
                                                                       capsys):
    out = tmp_path / "run"
    assert main(["pretrain", "--report-to", "wandb", "--model", "bert-tiny", "--steps", "1",
                 "--data", str(tmp_path / "unused"), "--out", str(out)]) == 1
    line = error_line(capsys.readouterr().err)
    assert line == ("lmlab: error: --report-to wandb: the installed wandb package fails to "
                    "import (ModuleNotFoundError: No module named 'wandb.sdk'); reinstall it "
                    "with pip install --force-reinstall 'lmlab[wandb]', or leave out "
                    "--report-to wandb")
    assert not out.exists()


def test_a_broken_tracker_refuses_fine_tuning_before_anything_is_written(broken_wandb,
                                                                          tmp_path, capsys):
    from lmlab.export.importer import import_hf
    from tests.test_hf_import import saved_bert

    saved_bert(tmp_path / "hf", class_name="BertModel")
    run = import_hf(tmp_path / "hf", tmp_path / "bert").out
    data = tmp_path / "labelled.tsv"
    data.write_text("label\ttext\n" + "".join(f"{i % 2}\ttext {i}\n" for i in range(8)))
    capsys.readouterr()
    assert main(["finetune", str(run), "--train", str(data), "--validation", str(data),
                 "--report-to", "wandb", "--out", str(tmp_path / "ft")]) == 1
    assert "the installed wandb package fails to import" in error_line(capsys.readouterr().err)
    assert not (tmp_path / "ft").exists()


@pytest.mark.slow
def test_bad_input_under_datatrove_is_one_line_and_its_traceback_stays_in_the_logs(
        tmp_path, capfd, monkeypatch):
    pytest.importorskip("datatrove")
    import lmlab.data.preparation.datatrove as datatrove_prepare

    # the work folder would go with the bad input: keep it to read its logs
    monkeypatch.setattr(datatrove_prepare.shutil, "rmtree", lambda path, **_: None)
    corpus = tmp_path / "bad.jsonl"
    corpus.write_text(json.dumps({"text": "one"}) + "\nnot json\n" + json.dumps({"text": "two"})
                      + "\n")
    assert main(["prepare", str(corpus), "--out", str(tmp_path / "data"), "--engine",
                 "datatrove", "--tasks", "2", "--strict"]) == 1
    out, err = capfd.readouterr()
    assert error_line(err) == f"lmlab: error: {corpus}:2: not valid JSON"
    assert out == "stage 1/8: read and clean (2 tasks)\n"
    assert not (tmp_path / "data").exists()
    work = tmp_path / ".data.datatrove"
    logs = "".join(path.read_text() for path in (work / "logs").rglob("task_*.log"))
    assert "Traceback" in logs and "not valid JSON" in logs
    assert (work / "logs" / "main.log").is_file()


def test_an_unclosed_csv_quote_is_named_as_such_when_fine_tuning(tmp_path):
    from lmlab.data.errors import DataError
    from lmlab.data.text.readers import ReadOptions, Record, read_rows

    def rows(path):  # as fine-tuning reads a table: every problem fatal
        return list(read_rows(path, ReadOptions(strict=True)))

    table = tmp_path / "tweets.csv"
    table.write_text('label,text\npos,"good movie\nneg,bad movie\npos,fine\n')
    with pytest.raises(DataError) as raised:
        rows(table)
    assert str(raised.value) == f"{table}:2: a quote opened in this row is never closed"
    closed = tmp_path / "closed.csv"
    closed.write_text('label,text\npos,"good\nmovie"\nneg,bad\n')
    assert rows(closed) == [Record(2, {"label": "pos", "text": "good\nmovie"}),
                            Record(4, {"label": "neg", "text": "bad"})]


def test_importing_a_file_that_is_no_model_says_so(tmp_path, capsys):
    weights = tmp_path / "pytorch_model.bin"
    weights.write_bytes(b"\0" * 16)
    assert main(["import", str(weights), "--out", str(tmp_path / "run")]) == 1
    assert error_line(capsys.readouterr().err) == (
        f"lmlab: error: {weights} is a file, not a model lmlab imports: give a Hugging Face "
        "model directory (config.json, weights, tokenizer) or a .gguf file")
    assert main(["import", str(tmp_path / "missing"), "--out", str(tmp_path / "run")]) == 1
    assert error_line(capsys.readouterr().err).endswith("missing: no such directory")
    assert not (tmp_path / "run").exists()
