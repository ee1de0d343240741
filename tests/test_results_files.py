"""The committed benchmark results name the machine they were measured on (its CPU) and none of
its folders: no absolute path, home directory or drive letter in any text file under
benchmarks/results/. Each JSON file says what made it: the command line, the commit, the time
(`made_by`; for a file older than that record, the same recorded afterwards from the history)
and the machine. And the writer the benchmarks share (benchmarks/record.py) writes all of that,
rewriting every kind of path it meets so that the check holds."""

import importlib.util
import json
import re
import tempfile
from datetime import datetime
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
# A string that starts with a path, a machine's usual top folders anywhere, a drive letter.
LEADING_PATH = re.compile(r"(?:^|[\s\"'(=,\[])(?:/[\w.~-]|~/)")
MACHINE_FOLDER = re.compile(r"/(?:tmp|work|root|home|Users|mnt|private|var)/|\b[A-Za-z]:\\")
INLINE_IMAGE = re.compile(r"base64,[A-Za-z0-9+/=]+")


def machine_paths(text: str) -> list[str]:
    return [m.group(0) for pattern in (LEADING_PATH, MACHINE_FOLDER)
            for m in pattern.finditer(text)]


def strings(value):
    """Every string of a JSON tree, keys included."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)
    elif isinstance(value, str):
        yield value


def machines(value):
    """Every value stored under a "machine" key, at any depth."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "machine":
                yield item
            yield from machines(item)
    elif isinstance(value, list):
        for item in value:
            yield from machines(item)


def text_files() -> list[Path]:
    found = []
    for path in sorted(RESULTS.rglob("*")):
        try:
            path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, IsADirectoryError):
            continue  # PNGs and folders
        found.append(path)
    return found


def test_there_are_results_to_check():
    names = {path.name for path in text_files()}
    assert {"train_speed.json", "blimp_eval.json", "comparison.json", "report.html"} <= names


@pytest.mark.parametrize("path", text_files(), ids=lambda p: str(p.relative_to(RESULTS)))
def test_a_results_file_names_no_folder_of_its_machine(path):
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        found = [s for s in strings(json.loads(text)) if machine_paths(s)]
    else:
        found = machine_paths(INLINE_IMAGE.sub("", text))
    assert found == []


@pytest.mark.parametrize("path", sorted(RESULTS.rglob("*.json")),
                         ids=lambda p: str(p.relative_to(RESULTS)))
def test_a_json_results_file_names_its_cpu(path):
    found = list(machines(json.loads(path.read_text())))
    assert found, "no machine record"
    for machine in found:
        assert isinstance(machine, dict) and isinstance(machine.get("cpu"), str)
        assert machine["cpu"].strip()


def provenance_gaps(results: dict) -> list[str]:
    """What a results file lacks of its provenance: `made_by` with the command (null only where
    the block says it was recorded afterwards, from the history), the commit and the time it
    was made, and a `machine` block."""
    gaps = []
    made_by = results.get("made_by")
    if not isinstance(made_by, dict):
        gaps.append("made_by")
    else:
        command = made_by.get("command")
        afterwards = made_by.get("recorded_afterwards")
        if not (isinstance(command, str) and command.strip()):
            if not (command is None and "command" in made_by
                    and isinstance(afterwards, str) and afterwards.strip()):
                gaps.append("made_by.command")
        commit = made_by.get("commit")
        if not (isinstance(commit, str) and re.fullmatch(r"[0-9a-f]{40}", commit)):
            gaps.append("made_by.commit")
        try:
            datetime.fromisoformat(made_by.get("made_at"))
        except (TypeError, ValueError):
            gaps.append("made_by.made_at")
    if not isinstance(results.get("machine"), dict):
        gaps.append("machine")
    return gaps


@pytest.mark.parametrize("path", sorted(RESULTS.rglob("*.json")),
                         ids=lambda p: str(p.relative_to(RESULTS)))
def test_a_json_results_file_says_what_made_it(path):
    """The command line, the commit, when and on what machine: every results file."""
    assert provenance_gaps(json.loads(path.read_text())) == []


def test_the_provenance_check_fails_a_file_without_it(tmp_path):
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps({"rows": [{"ratio": 1.2}]}))
    assert provenance_gaps(json.loads(bare.read_text())) == ["made_by", "machine"]
    made_by = {"command": None, "commit": "0" * 40, "made_at": "2026-11-23T00:36:08+00:00"}
    # a null command only beside a note that it was recorded afterwards
    assert provenance_gaps({"made_by": made_by, "machine": {"cpu": "x"}}) == ["made_by.command"]
    noted = {**made_by, "recorded_afterwards": "from git history"}
    assert provenance_gaps({"made_by": noted, "machine": {"cpu": "x"}}) == []
    assert provenance_gaps({"made_by": {**noted, "commit": "HEAD", "made_at": "yesterday"},
                            "machine": {"cpu": "x"}}) == ["made_by.commit", "made_by.made_at"]


def test_the_benchmarks_writer_records_what_made_a_file(tmp_path):
    out = tmp_path / "x.json"
    load_record().write_results(out, {"machine": {"cpu": "x"}, "rows": []})
    written = json.loads(out.read_text())
    # outside a git checkout (an unpacked release) there is no commit to name
    has_git = (ROOT / ".git").exists()
    assert [gap for gap in provenance_gaps(written)
            if has_git or gap != "made_by.commit"] == []
    assert written["made_by"]["command"].startswith("python ")


def load_record():
    spec = importlib.util.spec_from_file_location("record", ROOT / "benchmarks" / "record.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_benchmarks_writer_leaves_no_folder_of_the_machine(tmp_path):
    record = load_record()
    work = Path(tempfile.gettempdir()) / "lmlab-bench-x1"
    results = {
        "settings": {"out": str(ROOT / "benchmarks" / "results" / "x.json"),
                     "blimp": str(ROOT.parent / "shared" / "data" / "blimp"),
                     "run": str(work / "runs" / "mlm"),
                     "scratch": str(Path(tempfile.gettempdir()) / "blimp" / "data"),
                     "home": str(Path.home() / "runs" / "clm"), "elsewhere": "/opt/models/smol",
                     "windows": "C:\\Users\\me\\run", "rate": "1/4 of tokens/s"},
        "note": f"read from ({ROOT.parent / 'shared' / 'data'}), 16 MB",
        str(work / "key.jsonl"): [1, 2.5],
    }
    out = tmp_path / "x.json"
    record.write_results(out, results, work)
    written = json.loads(out.read_text())
    assert [s for s in strings(written) if machine_paths(s)] == []
    assert written["settings"] == {
        "out": "benchmarks/results/x.json", "blimp": "shared/data/blimp",
        "run": "$WORK/runs/mlm", "scratch": "$TMP/blimp/data", "home": "$HOME/runs/clm",
        "elsewhere": "$ELSEWHERE/smol", "windows": "$ELSEWHERE/run", "rate": "1/4 of tokens/s"}
    assert written["note"] == "read from (shared/data), 16 MB"
    assert written["$WORK/key.jsonl"] == [1, 2.5]
    # a folder whose name only begins like the repository's is not taken for it (what it is
    # taken for instead depends on where the repository lies: $TMP/..., $HOME/..., ...)
    sibling = record.portable_text(f"{ROOT}ly/x")
    assert not sibling.startswith("ly/") and sibling.endswith("/x")
    assert not machine_paths(sibling)


def test_the_machine_is_named_by_its_cpu():
    from lmlab.kernels.machine import cpu_name

    facts = load_record().machine(threads=2)
    assert facts["cpu"] == cpu_name() and facts["cpu"] and facts["threads"] == 2


def scored_splits(value, where="the file"):
    """(where, validation, test) for every block of a JSON tree that scores both splits."""
    if isinstance(value, dict):
        if isinstance(value.get("validation"), dict) and isinstance(value.get("test"), dict):
            yield where, value["validation"], value["test"]
        for key, item in value.items():
            yield from scored_splits(item, key)
    elif isinstance(value, list):
        for item in value:
            yield from scored_splits(item, where)


@pytest.mark.parametrize("path", sorted(RESULTS.rglob("*.json")),
                         ids=lambda p: str(p.relative_to(RESULTS)))
def test_no_test_block_is_the_validation_block(path):
    """The validation split chooses the best checkpoint; a "test" that repeats its scores is
    no test, and a figure quoted from it would be optimistic."""
    same = [where for where, validation, test in scored_splits(json.loads(path.read_text()))
            if validation == test]
    assert same == []


def test_the_check_finds_a_test_that_repeats_validation():
    scores = {"accuracy": 0.8}
    found = scored_splits({"runs": {"a/sst2": {"validation": scores, "test": dict(scores)}}})
    assert [where for where, validation, test in found if validation == test] == ["a/sst2"]
