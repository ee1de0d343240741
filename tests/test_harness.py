"""`lmlab eval --harness`: lm-evaluation-harness on a run through lmlab's own model class
(lmlab/harness/lm_harness.py). On a tiny GPT-2 run exported to Hugging Face format, every
per-document log-likelihood equals that of lm-eval's own `hf` model pointed at the export
(within 1e-4), the greedy flags and generations are the same, and so are the tasks' metrics.
The tasks are YAMLs with their own data in tests/harness_tasks/, read offline."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from lm_eval import simple_evaluate
from lm_eval.models.huggingface import HFLM
from lm_eval.tasks import TaskManager

from lmlab.cli import main
from lmlab.export.writer import export_run
from lmlab.harness.lm_harness import RunLM
from lmlab.harness.offline import hub_offline
from lmlab.runs import load_run
from tests.hf_runs import pretrained_run

TASKS = Path(__file__).parent / "harness_tasks"
CHOICE, TEXT, GENERATE = "lmlab_tiny_choice", "lmlab_tiny_text", "lmlab_tiny_generate"
TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """(lmlab's run directory, its Hugging Face export)."""
    root = tmp_path_factory.mktemp("harness")
    path = pretrained_run(root / "run", "gpt2", "clm")
    export_run(load_run(path), root / "hf")
    return path, root / "hf"


@pytest.fixture(scope="module")
def both(exported):
    """lm-eval's outputs, samples included, for lmlab's model class and for its hf model."""
    run, hf = exported
    tasks = [CHOICE, TEXT, GENERATE]
    with pytest.MonkeyPatch.context() as patch, hub_offline():
        patch.chdir(TASKS)  # the YAMLs name their data files relative to the working directory
        manager = TaskManager(include_path=str(TASKS))
        ours = simple_evaluate(model=RunLM(load_run(run)), tasks=tasks, task_manager=manager,
                               log_samples=True)
        theirs = simple_evaluate(model=HFLM(pretrained=str(hf), device="cpu", batch_size=4),
                                 tasks=tasks, task_manager=manager, log_samples=True)
    return ours, theirs


def responses(output: dict, task: str) -> list:
    """Each document's responses, in document order."""
    return [sample["resps"] for sample in sorted(output["samples"][task],
                                                 key=lambda s: s["doc_id"])]


@pytest.mark.parametrize("task", [CHOICE, TEXT])
def test_per_document_log_likelihoods_match_lm_evals_hf_model(both, task):
    ours, theirs = (responses(output, task) for output in both)
    assert len(ours) == len(theirs) == {CHOICE: 6, TEXT: 4}[task]
    flat = lambda docs: [r[0] if task == TEXT else r[0][0] for doc in docs for r in doc]  # noqa: E731
    difference = max(abs(a - b) for a, b in zip(flat(ours), flat(theirs), strict=True))
    assert difference <= TOLERANCE
    if task == CHOICE:  # whether each choice was the greedy continuation
        greedy = lambda docs: [r[0][1] for doc in docs for r in doc]  # noqa: E731
        assert greedy(ours) == greedy(theirs)


def test_the_text_task_reads_past_the_models_context(exported):
    """One document is longer than the 64-token context, so rolling windows are exercised."""
    tokenizer = load_run(exported[0]).tokenizer
    lines = (TASKS / "text.jsonl").read_text().splitlines()
    assert max(len(tokenizer.encode(json.loads(line)["text"]).ids) for line in lines) > 128


def test_metrics_are_those_of_lm_evals_hf_model(both):
    ours, theirs = (output["results"] for output in both)
    for name in ("acc,none", "acc_norm,none"):
        assert ours[CHOICE][name] == theirs[CHOICE][name]
    assert ours[GENERATE]["exact_match,none"] == theirs[GENERATE]["exact_match,none"]
    for name in ("word_perplexity,none", "byte_perplexity,none", "bits_per_byte,none"):
        assert ours[TEXT][name] == pytest.approx(theirs[TEXT][name], rel=1e-6)


def test_greedy_generations_are_those_of_lm_evals_hf_model(both):
    ours, theirs = (responses(output, GENERATE) for output in both)
    assert len(ours) == 4 and ours == theirs


def test_the_command_writes_lm_evals_results(exported, both, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(TASKS)
    out = tmp_path / "results" / "harness.json"
    assert main(["eval", str(exported[0]), "--harness", f"{CHOICE}, {TEXT}",
                 "--harness-include", str(TASKS), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert CHOICE in printed and "acc_norm" in printed and "bits_per_byte" in printed
    written = json.loads(out.read_text())
    assert set(written["results"]) == {CHOICE, TEXT}
    assert written["versions"][CHOICE] == 1.0 and "configs" in written
    assert written["results"][CHOICE]["acc,none"] == both[0]["results"][CHOICE]["acc,none"]
    assert written["results"][TEXT]["bits_per_byte,none"] == pytest.approx(
        both[0]["results"][TEXT]["bits_per_byte,none"], rel=1e-12)


def one_line_error(capsys, args) -> str:
    assert main(args) == 1
    error = capsys.readouterr().err
    assert error.startswith("lmlab: error: ") and error.count("\n") == 1
    return error


def test_bad_input_is_one_line_and_exit_1(exported, tmp_path, capsys):
    run = str(exported[0])
    assert "no task 'no_such_task'" in one_line_error(
        capsys, ["eval", run, "--harness", "no_such_task", "--harness-include", str(TASKS)])
    assert "--harness-include" in one_line_error(
        capsys, ["eval", run, "--harness", "no_such_task"])
    assert "no such folder" in one_line_error(
        capsys, ["eval", run, "--harness", CHOICE, "--harness-include", str(tmp_path / "none")])
    assert "give --harness" in one_line_error(
        capsys, ["eval", run, "--harness-include", str(TASKS)])
    assert "alone" in one_line_error(
        capsys, ["eval", run, "--harness", CHOICE, "--pairs", str(tmp_path / "p.jsonl")])
    assert "at least one task" in one_line_error(capsys, ["eval", run, "--harness", ","])
    hub = tmp_path / "hub"  # a task whose data only the hub has: never downloaded
    hub.mkdir()
    (hub / "hub_task.yaml").write_text((TASKS / "tiny_choice.yaml").read_text().replace(
        "task: lmlab_tiny_choice", "task: hub_task").replace(
        "dataset_path: json", "dataset_path: lmlab-tests/absent"))
    assert "reads task data offline" in one_line_error(
        capsys, ["eval", run, "--harness", "hub_task", "--harness-include", str(hub)])
    masked = pretrained_run(tmp_path / "mlm", "bert", "mlm")
    assert "never learned to predict the next token" in one_line_error(
        capsys, ["eval", str(masked), "--harness", CHOICE, "--harness-include", str(TASKS)])


def test_without_lm_eval_the_extra_is_named(exported, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "lm_eval", None)  # as if it were not installed
    assert "pip install 'lmlab[harness]'" in one_line_error(
        capsys, ["eval", str(exported[0]), "--harness", CHOICE])
