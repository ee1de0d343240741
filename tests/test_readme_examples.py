"""The `lmlab ...` examples of README.md and docs/*.md hold: every option they name is one
their subcommand takes, README's table names every subcommand, and the examples that use a
trained run (`lmlab COMMAND runs/NAME ...`) run, as written, on tiny runs laid out under the
names the documentation gives them."""

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lmlab.cli import build_parser, main
from tests.serve_runs import make_runs

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
TASKS = ROOT / "tests" / "harness_tasks"  # lm-eval task YAMLs and their data
DOCUMENTS = [README, *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
INLINE = re.compile(r"`(lmlab [^`]+)`")
COMMAND = re.compile(r"(?:^|\s)(?:-m\s+)?lmlab\s+(?=[a-z])")  # lmlab X, python -m lmlab X
RUNNABLE = ("fill-mask", "generate", "embed", "predict", "eval")
# The documented run names → the tiny run standing in for each (runs/bert: an imported
# encoder; runs/student: a distilled classifier, a fine-tuned run like any other).
STAND_INS = {"mlm": "mlm", "clm": "clm", "span": "span", "bert": "mlm", "sst2": "classify",
             "qa": "qa", "ner": "ner", "student": "classify"}


def documented_commands(documents: list[Path] = DOCUMENTS) -> list[list[str]]:
    """Each distinct `lmlab SUBCOMMAND ...` of the documents' code (blocks, with continued lines
    joined, and inline spans) as its words from SUBCOMMAND on, comments dropped."""
    commands = []
    for document in documents:
        text = document.read_text(encoding="utf-8")
        lines = [line for block in FENCE.findall(text)
                 for line in block.replace("\\\n", " ").splitlines()] + INLINE.findall(text)
        commands += [shlex.split(line[found.end():], comments=True)
                     for line in lines if (found := COMMAND.search(line))]
    return [list(words) for words in dict.fromkeys(map(tuple, commands))]


def subcommands() -> dict:
    return build_parser()._subparsers._group_actions[0].choices


def test_documents_name_only_options_their_commands_take():
    commands = documented_commands()
    assert len(commands) > 30 and {words[0] for words in commands} >= set(RUNNABLE)
    parsers = subcommands()
    for words in commands:
        assert words[0] in parsers, words
        known = {option for action in parsers[words[0]]._actions
                 for option in action.option_strings}
        named = {word.split("=")[0] for word in words[1:] if word.startswith("--")}
        assert named <= known, f"lmlab {' '.join(words)}: no {sorted(named - known)}"


def test_readme_table_has_an_example_of_every_command():
    assert {words[0] for words in documented_commands([README])} == set(subcommands())


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    """A folder holding what the examples name: runs/NAME, texts, pairs, a prepared dataset."""
    root = tmp_path_factory.mktemp("readme")
    made = make_runs(root / "made")
    (root / "runs").mkdir()
    for name, stand_in in STAND_INS.items():
        (root / "runs" / name).symlink_to(made[stand_in])
    (root / "texts.txt").write_text("the cat [MASK] home.\na [MASK] runs fast.\n")
    (root / "sentences.txt").write_text("the cat runs home.\nthe dog sees a bird.\n")
    (root / "notes.txt").write_text("the cat likes a bird. the dog runs home fast.\n")
    (root / "more.jsonl").write_text("".join(
        json.dumps({"text": f"the {animal} sees a bird and runs home {n}."}) + "\n"
        for n in range(200) for animal in ("cat", "dog")))
    (root / "blimp").mkdir()
    (root / "blimp" / "agreement.jsonl").write_text(json.dumps(
        {"sentence_good": "the cat runs.", "sentence_bad": "the cat run."}) + "\n")
    shutil.copy(root / "made" / "ner.conll", root / "test.conll")
    # docs/eval.md's lm-eval task of your own: tasks/my_task.yaml over my_task.jsonl
    (root / "tasks").mkdir()
    (root / "tasks" / "my_task.yaml").write_text(
        (TASKS / "tiny_choice.yaml").read_text().replace("lmlab_tiny_choice", "my_task")
        .replace("choice.jsonl", "my_task.jsonl"))
    shutil.copy(TASKS / "choice.jsonl", root / "my_task.jsonl")
    assert main(["prepare", str(root / "more.jsonl"), "--out", str(root / "data" / "mine"),
                 "--tokenizer", str(root / "runs" / "clm" / "tokenizer.json"),
                 "--sentinels", "8"]) == 0
    return root


def uses_a_run(words: list[str]) -> bool:
    return words[0] in RUNNABLE and len(words) > 1 and words[1].startswith("runs/")


@pytest.mark.slow
@pytest.mark.parametrize("words", [words for words in documented_commands() if uses_a_run(words)],
                         ids=lambda words: " ".join(words))
def test_documented_examples_run_as_written(workspace, words):
    result = subprocess.run([sys.executable, "-m", "lmlab", *words], cwd=workspace,
                            capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
                            env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.stdout.strip()
    if words[0] == "embed" and "--out" not in words:  # vectors printed, one JSON line a text
        printed = [json.loads(line) for line in result.stdout.splitlines()]
        assert [p["text"] for p in printed] == [words[2]] and len(printed[0]["embedding"]) > 1
    if words[0] == "predict" and "--json" in words:
        assert all(json.loads(line) for line in result.stdout.splitlines())


def test_embed_without_out_prints_a_json_line_a_text(workspace, capsys, monkeypatch):
    monkeypatch.chdir(workspace)
    assert main(["embed", "runs/bert", "A sentence.", "another one", "--pooling", "mean"]) == 0
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [p["text"] for p in printed] == ["A sentence.", "another one"]
    vectors = [p["embedding"] for p in printed]
    assert len(vectors[0]) == len(vectors[1]) > 1 and vectors[0] != vectors[1]
