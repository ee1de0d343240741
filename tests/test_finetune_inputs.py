"""What fine-tuning and `lmlab predict` make of a new user's files: a training split with one
label is refused before anything is written, and predict reads a plain text file one text a
line (as fill-mask and embed do) while a file in the task's format keeps its examples."""

import json

import pytest

from lmlab.data.errors import DataError
from lmlab.tasks.labels import class_names
from lmlab.tasks.readers import TextExample, is_conll, is_squad, is_table
from tests.serve_runs import make_runs
from tests.test_finetune import one_thread, run_cli  # noqa: F401 (one_thread: autouse)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return make_runs(tmp_path_factory.mktemp("runs"))


def test_one_training_label_is_named_with_its_file():
    examples = [TextExample(f"text {i}", None, "pos", i + 2) for i in range(3)]
    with pytest.raises(DataError, match=r"^train.tsv: all 3 training rows with lang=en have "
                                        r"the label 'pos'; a classifier needs at least two"):
        class_names(examples, "train.tsv", "lang=en")
    assert class_names([*examples, TextExample("x", None, "neg", 9)], "train.tsv") == ["neg",
                                                                                       "pos"]


@pytest.mark.parametrize("task, header, row", [
    ("classify", "label\tsentence", "pos\tthe cat runs"),
    ("pairs", "label\tsentence_A\tsentence_B", "same\tthe cat\tthe dog"),
])
def test_classifying_one_label_is_refused_before_anything_is_written(runs, tmp_path, capsys,
                                                                      task, header, row):
    data = tmp_path / "one-label.tsv"
    data.write_text(header + "\n" + "".join(f"{row} {i}\n" for i in range(6)))
    out = tmp_path / "ft"
    code, stdout, err = run_cli(capsys, "finetune", runs["mlm"], "--task", task, "--train",
                                data, "--validation", data, "--out", out)
    assert code == 1 and stdout == ""
    assert err.count("\n") == 1 and "all 6 training rows have the label" in err
    assert not out.exists()


def test_sniffing_tells_task_files_from_plain_text(tmp_path):
    plain = tmp_path / "notes.txt"
    plain.write_text("the cat runs\nthe dog sees a bird O\n")
    table = tmp_path / "SICK.txt"  # a table by its tabs, whatever its suffix
    table.write_text("sentence_A\tsentence_B\tscore\na\tb\t1\n")
    conll = tmp_path / "test.annotated"
    conll.write_text("-DOCSTART- O\n\nthe\tO\ncat\tB-ANI\n")
    squad = tmp_path / "dev.txt"
    squad.write_text('  {"data": []}')
    assert [is_table(p) for p in (plain, table)] == [False, True]
    assert is_table(tmp_path / "empty.tsv")  # by its suffix, never opened
    assert [is_conll(p) for p in (plain, table, conll)] == [False, False, True]
    assert [is_squad(p) for p in (plain, squad)] == [False, True]


def test_predict_reads_a_plain_text_file_one_text_a_line(runs, tmp_path, capsys):
    notes = tmp_path / "notes.txt"
    notes.write_text("the cat runs\n\nthe dog sees a bird\n")
    code, stdout, _ = run_cli(capsys, "predict", runs["classify"], "--file", notes, "--json")
    from_file = [json.loads(line) for line in stdout.splitlines()]
    code_args, stdout_args, _ = run_cli(capsys, "predict", runs["classify"], "--json",
                                        "the cat runs", "the dog sees a bird")
    assert code == code_args == 0
    assert len(from_file) == 2 and from_file == [json.loads(line)
                                                 for line in stdout_args.splitlines()]


def test_predict_reads_a_task_file_as_examples(runs, tmp_path, capsys):
    """The training TSV's texts (its labels ignored) and CoNLL with tags training never saw."""
    code, stdout, _ = run_cli(capsys, "predict", runs["classify"], "--json", "--file",
                              f"{runs['mlm']}/../sentiment.tsv")
    assert code == 0 and len(stdout.splitlines()) == 32
    conll = tmp_path / "test.annotated"
    conll.write_text("the\tO\ncat\tB-location\nruns\tO\n\nthe\tO\ndog\tB-person\n")
    code, stdout, _ = run_cli(capsys, "predict", runs["ner"], "--json", "--file", conll)
    assert code == 0 and len(stdout.splitlines()) == 2
    questions = tmp_path / "questions.txt"
    questions.write_text("which animal ? ||| the cat sees a bird\n")
    code, stdout, _ = run_cli(capsys, "predict", runs["qa"], "--json", "--file", questions)
    assert code == 0 and json.loads(stdout)["answer"] in "the cat sees a bird"


def test_predict_json_gives_each_input_and_its_gold_label(runs, tmp_path, capsys):
    table = tmp_path / "labelled.tsv"
    table.write_text("label\tsentence\npos\tthe cat runs\nneg\tthe dog sees a bird\n")
    code, stdout, _ = run_cli(capsys, "predict", runs["classify"], "--json", "--file", table)
    found = [json.loads(line) for line in stdout.splitlines()]
    assert code == 0 and [(f["text"], f["gold"]) for f in found] == [
        ("the cat runs", "pos"), ("the dog sees a bird", "neg")]
    assert all(f["label"] in ("pos", "neg") and 0 <= f["score"] <= 1 for f in found)
    code, stdout, _ = run_cli(capsys, "predict", runs["classify"], "--json", "the cat runs")
    assert code == 0 and json.loads(stdout).keys() == {"text", "label", "score"}  # no gold
    code, stdout, _ = run_cli(capsys, "predict", runs["classify"], "the cat runs")
    assert "the cat runs" not in stdout  # the terminal's line stays the label and score


def test_predict_takes_texts_or_a_file_not_both(runs, tmp_path, capsys):
    notes = tmp_path / "notes.txt"
    notes.write_text("the cat runs\n")
    code, stdout, err = run_cli(capsys, "predict", runs["classify"], "--file", notes, "a text")
    assert code == 1 and stdout == ""
    assert err == "lmlab: error: give texts as arguments or with --file, not both\n"
