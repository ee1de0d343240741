"""`lmlab eval --mteb`: MTEB on a run's embeddings through lmlab's own encoder class
(lmlab/harness/mteb_encoder.py). On tiny encoder runs exported with `lmlab export --format
sentence-transformers`, every score of a small STS task equals MTEB's score of the export.
The task is built from sentence pairs the tests ship (tests/mteb_tasks/sts.jsonl), offline."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import datasets
import mteb
import pytest
from mteb.abstasks.sts import AbsTaskSTS
from mteb.abstasks.task_metadata import TaskMetadata
from mteb.get_tasks import _TASKS_REGISTRY  # MTEB's tasks by name

from lmlab.cli import main
from lmlab.export.writer import export_run
from lmlab.harness.mteb_encoder import evaluate_mteb
from lmlab.runs import load_run
from tests.hf_runs import pretrained_run

PAIRS = Path(__file__).parent / "mteb_tasks" / "sts.jsonl"
NAME = "LmlabTinySTS"


class TinySTS(AbsTaskSTS):
    """Ten sentence pairs with similarity scores from 0 to 5, read from the shipped file."""

    min_score, max_score = 0, 5
    metadata = TaskMetadata(
        name=NAME, description="Ten sentence pairs scored from 0 to 5.", reference=None,
        dataset={"path": "lmlab/tiny-sts", "revision": "1"}, type="STS", category="t2t",
        modalities=["text"], eval_splits=["test"], eval_langs=["eng-Latn"],
        main_score="cosine_spearman", date=None, domains=None, task_subtypes=None,
        license=None, annotations_creators=None, dialect=None, sample_creation=None,
        bibtex_citation=None)

    def load_data(self, **kwargs) -> None:
        rows = [json.loads(line) for line in PAIRS.read_text().splitlines()]
        self.dataset = datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)})
        self.data_loaded = True


def scores(result) -> dict:
    (task,) = result.task_results
    (subset,) = task.scores["test"]
    return {name: value for name, value in subset.items() if isinstance(value, float)}


@pytest.mark.parametrize(("family", "pooling"), [("bert", "cls"), ("modernbert", "mean-all")])
def test_scores_equal_mtebs_of_the_sentence_transformers_export(tmp_path, family, pooling):
    from sentence_transformers import SentenceTransformer

    run = load_run(pretrained_run(tmp_path / "run", family, "mlm"))
    export_run(run, tmp_path / "st", format="sentence-transformers", pooling=pooling)
    exported = SentenceTransformer(str(tmp_path / "st"), device="cpu")
    theirs = scores(mteb.evaluate(exported, TinySTS(), cache=None, co2_tracker=False,
                                  show_progress_bar=False))
    ours = scores(evaluate_mteb(run, [TinySTS()], pooling))
    assert set(ours) == set(theirs) >= {"main_score", "cosine_spearman", "euclidean_pearson"}
    assert ours == pytest.approx(theirs, abs=1e-6)
    assert ours["main_score"] == ours["cosine_spearman"] != 0


@pytest.fixture
def registered(monkeypatch):
    """The tiny task among MTEB's own, so the command line finds it by name."""
    monkeypatch.setitem(_TASKS_REGISTRY, NAME, TinySTS)


def test_the_command_prints_and_writes_mtebs_results(tmp_path, registered, capsys):
    run = pretrained_run(tmp_path / "run", "bert", "mlm")
    out = tmp_path / "results" / "mteb.json"
    assert main(["eval", str(run), "--mteb", NAME, "--pooling", "cls", "--out", str(out)]) == 0
    expected = scores(evaluate_mteb(load_run(run), [TinySTS()], "cls"))["main_score"]
    assert f"{NAME}  test  default  main score {expected:.4f}" in capsys.readouterr().out
    (written,) = json.loads(out.read_text())
    assert written["task_name"] == NAME
    assert written["scores"]["test"][0]["main_score"] == pytest.approx(expected, abs=1e-12)


def one_line_error(capsys, args) -> str:
    assert main(args) == 1
    error = capsys.readouterr().err
    assert error.startswith("lmlab: error: ") and error.count("\n") == 1
    return error


def test_bad_input_is_one_line_and_exit_1(tmp_path, monkeypatch, capsys):
    run = str(pretrained_run(tmp_path / "run", "bert", "mlm"))
    assert "MTEB has no task 'STSBenchmarkk'" in one_line_error(
        capsys, ["eval", run, "--mteb", "STSBenchmarkk"])
    assert "give --mteb" in one_line_error(capsys, ["eval", run, "--pooling", "cls"])
    assert "each run alone" in one_line_error(
        capsys, ["eval", run, "--mteb", NAME, "--harness", "x"])
    assert "alone" in one_line_error(
        capsys, ["eval", run, "--mteb", NAME, "--data", str(tmp_path / "a.txt")])
    assert "at least one task" in one_line_error(capsys, ["eval", run, "--mteb", " "])
    monkeypatch.setitem(_TASKS_REGISTRY, "HubOnly", type(
        "HubOnly", (AbsTaskSTS,), {"metadata": TinySTS.metadata.model_copy(update=dict(
            name="HubOnly", dataset={"path": "lmlab-tests/absent", "revision": "1"}))}))
    assert "reads task data offline" in one_line_error(
        capsys, ["eval", run, "--mteb", "HubOnly"])
    monkeypatch.setitem(sys.modules, "mteb", None)  # as if not installed
    assert "pip install 'lmlab[mteb]'" in one_line_error(capsys, ["eval", run, "--mteb", NAME])
