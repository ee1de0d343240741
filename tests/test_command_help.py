"""Help that says what the code does: RUN names the runs a command reads, and `--checkpoint
best` is described as the best it is: a pre-trained run's lowest validation loss, a fine-tuned
run's highest validation score on its task's main metric."""

import json

import pytest

from lmlab.cli import build_parser
from lmlab.runs.checkpoints import checkpoint_name
from lmlab.runs.run import pick_checkpoint
from tests.serve_runs import make_runs


def option_help(command: str, dest: str) -> str:
    parser = build_parser()._subparsers._group_actions[0].choices[command]
    return " ".join(next(a.help for a in parser._actions if a.dest == dest).split())


def run_commands() -> list[str]:
    return [name for name, parser in build_parser()._subparsers._group_actions[0].choices.items()
            if any(action.dest == "checkpoint" for action in parser._actions)]


def test_predict_reads_fine_tuned_runs_and_their_best_by_the_main_metric():
    assert option_help("predict", "run_dir") == "a run directory written by lmlab finetune"
    best = option_help("predict", "checkpoint")
    assert "main metric" in best and "loss" not in best


@pytest.mark.parametrize("command", run_commands())
def test_best_is_described_for_every_run_a_command_reads(command):
    runs, best = option_help(command, "run_dir"), option_help(command, "checkpoint")
    assert runs.startswith("a run directory written by lmlab")
    assert ("finetune" in runs) == ("main metric" in best)
    assert ("pretrain" in runs) == ("lowest validation loss" in best)


def test_a_fine_tuned_runs_best_has_the_highest_main_metric(tmp_path):
    run = make_runs(tmp_path)["classify"]
    rows = [json.loads(line) for line in open(f"{run}/metrics.jsonl")]
    evals = [row for row in rows if row["kind"] == "eval"]
    assert len(evals) == 2  # validated at each of its two steps
    first_best = max(evals, key=lambda row: row["accuracy"])  # the earliest of equals
    assert pick_checkpoint(tmp_path / "classify", "best").name == checkpoint_name(
        first_best["step"])
