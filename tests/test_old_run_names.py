"""Runs saved before the extractive-QA head was called `answer` (config.json's heads and the
checkpoint's weights under `span`, the name the span-corruption objective keeps) load, predict
and export exactly as a run saved today (lmlab/runs/old_names.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from safetensors.torch import load_file

from lmlab.export.writer import export_run
from lmlab.infer.predict import predict
from lmlab.runs.checkpoints import list_checkpoints, publish_checkpoint
from lmlab.runs.old_names import current_weight_name
from lmlab.runs.run import load_run
from tests.hf_runs import finetuned_run

QUESTIONS = ["who sells shells ? ||| She sells sea shells by the sea shore.",
             "what is the capital ? ||| Paris is the capital of France."]


def as_saved_before(run: Path, out: Path) -> Path:
    """A copy of `run` with its QA head under the name earlier versions wrote: `span`."""
    shutil.copytree(run, out)
    config = json.loads((out / "config.json").read_text())
    config["heads"] = {"span": config["heads"].pop("answer"), **config["heads"]}
    (out / "config.json").write_text(json.dumps(config))
    (checkpoint,) = list_checkpoints(out / "checkpoints")
    tensors = load_file(str(checkpoint / "model.safetensors"))
    renamed = {name.replace("heads.answer.", "heads.span.", 1): tensor
               for name, tensor in tensors.items()}
    assert any(name.startswith("heads.span.") for name in renamed)
    shutil.rmtree(checkpoint)
    publish_checkpoint(checkpoint, 1, renamed, {"loop": {}})
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("old-names")
    today = finetuned_run(root / "today", "qa", family="modernbert")
    return today, as_saved_before(today, root / "before")


def test_the_old_head_name_is_read_as_today_s(runs):
    today, before = (load_run(run) for run in runs)
    assert before.config.task.head == today.config.task.head == "answer"
    assert list(before.model.heads) == ["answer"]
    assert json.loads((runs[1] / "config.json").read_text())["heads"] == {"span": {}}


def test_a_run_saved_before_predicts_what_today_s_does(runs):
    today, before = (predict(run, QUESTIONS) for run in runs)
    assert before == today and len(today) == len(QUESTIONS)


def test_a_run_saved_before_exports_what_today_s_does(runs, tmp_path):
    exported = [export_run(load_run(run), tmp_path / run.name) for run in runs]
    today, before = (load_file(str(e.out / "model.safetensors")) for e in exported)
    assert sorted(before) == sorted(today)
    assert all(before[name].equal(today[name]) for name in today)
    assert ((exported[1].out / "config.json").read_text()
            == (exported[0].out / "config.json").read_text())


@pytest.mark.parametrize(("saved", "read"), [
    ("heads.span.outputs.weight", "heads.answer.outputs.weight"),
    ("heads.span.transform.norm.weight", "heads.answer.transform.norm.weight"),
    ("heads.lm.decoder.weight", "heads.lm.decoder.weight"),
    ("backbone.span.weight", "backbone.span.weight"),
    ("heads.span", "heads.span")])
def test_only_a_renamed_head_s_weights_change_name(saved, read):
    assert current_weight_name(saved) == read
