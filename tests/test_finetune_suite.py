"""`lmlab finetune RUN --suite ...`: every task fine-tuned with one set of settings for several
seeds, the median per task with its range and bag-of-words floor, and the average over tasks;
the suite given as flags or as a file; malformed entries refused in one line."""

import json
import random
import statistics

import pytest
import torch

from lmlab.cli import main
from lmlab.config.training import TrainConfig
from lmlab.finetune.suite import read_suite, suite_configs
from lmlab.train.entry import pretrain
from tests.test_finetune import words_dataset

WORDS = ["the", "cat", "dog", "sees", "a", "bird", "runs", "home", "Paris", "Anna", "Tom",
         "lives", "in", "good", "bad", "not"]
FAST = ["--steps", "2", "--batch-size", "16", "--lr", "2e-3", "--max-len", "32"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A masked run of two steps: the suite needs only a backbone and a tokenizer."""
    root = tmp_path_factory.mktemp("pretrained")
    dataset = words_dataset(WORDS, texts=600, held_out=50, longest=20, vocab_size=200)
    config = TrainConfig(objective="mlm", model="bert-tiny", seq_len=32, out=str(root / "mlm"),
                         batch_size=8, steps=2, eval_every=2)
    return str(pretrain(config, dataset))


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: one thread is faster on a busy machine
    yield
    torch.set_num_threads(threads)


def _sentence(rng: random.Random, word: str) -> str:
    words = [rng.choice(WORDS[:12]) for _ in range(rng.randint(3, 7))]
    words.insert(rng.randint(0, len(words)), word)
    return " ".join(words)


@pytest.fixture
def sst2(tmp_path):
    """SST-2's layout: `label<TAB>sentence`, labels 0/1, a file per split."""
    paths = []
    for split, rows, seed in (("train", 60, 1), ("dev", 20, 2), ("test", 20, 3)):
        rng = random.Random(seed)
        labels = [rng.choice("01") for _ in range(rows)]
        lines = [f"{label}\t{_sentence(rng, 'good' if label == '1' else 'bad')}"
                 for label in labels]
        path = tmp_path / f"sst2-{split}.tsv"
        path.write_text("label\tsentence\n" + "\n".join(lines) + "\n")
        paths.append(str(path))
    return paths


@pytest.fixture
def sick(tmp_path):
    """SICK's layout: one file of pairs, the split in SemEval_set, the label in
    entailment_label, with a config file naming them."""
    rng = random.Random(4)
    lines = []
    for number, split in enumerate(["TRAIN"] * 60 + ["TRIAL"] * 20 + ["TEST"] * 20, 1):
        label = rng.choice(["ENTAILMENT", "NEUTRAL", "CONTRADICTION"])
        first = _sentence(rng, "cat")
        second = first.replace("cat", "not cat" if label == "CONTRADICTION" else "cat")
        lines.append(f"{number}\t{first}\t{second}\t{label}\t{rng.uniform(1, 5):.1f}\t{split}")
    table = tmp_path / "SICK.txt"
    table.write_text("pair_ID\tsentence_A\tsentence_B\tentailment_label\trelatedness_score\t"
                     "SemEval_set\n" + "\n".join(lines) + "\n")
    config = tmp_path / "sick.yaml"
    config.write_text(f"task: pairs\ntrain: {table}\nvalidation: {table}\ntest: {table}\n"
                      "label_column: entailment_label\ntrain_where: SemEval_set=TRAIN\n"
                      "validation_where: SemEval_set=TRIAL\ntest_where: SemEval_set=TEST\n")
    return str(config)


@pytest.fixture
def wnut17(tmp_path):
    """WNUT-17's layout: `token<TAB>tag` (BIO), a blank line between sentences."""
    paths = []
    for split, count, seed in (("train", 30, 5), ("dev", 10, 6)):
        rng = random.Random(seed)
        sentences = []
        for _ in range(count):
            words = [rng.choice(WORDS[:7]) for _ in range(rng.randint(3, 6))]
            lines = [f"{word}\tO" for word in words]
            lines.insert(rng.randint(0, len(lines)), f"{rng.choice(['Paris', 'Anna'])}\t"
                                                     "B-location")
            sentences.append("\n".join(lines))
        path = tmp_path / f"wnut17-{split}.conll"
        path.write_text("\n\n".join(sentences) + "\n")
        paths.append(str(path))
    return paths


def run_cli(capsys, *args):
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_suite_reports_the_median_over_seeds_the_floor_and_the_average(run, sst2, sick,
                                                                       tmp_path, capsys):
    out = tmp_path / "suite"
    code, stdout, _ = run_cli(capsys, "finetune", run, "--suite",
                              "sst2=classify:" + ":".join(sst2), "--suite", f"sick={sick}",
                              "--seeds", "2", "--out", out, *FAST)
    assert code == 0
    summary = json.loads((out / "suite.json").read_text())
    assert summary["seeds"] == 2 and summary["settings"]["steps"] == 2
    assert [t["name"] for t in summary["tasks"]] == ["sst2", "sick"]
    for task in summary["tasks"]:
        seeds = [json.loads((out / task["name"] / f"seed-{i}" / "results.json").read_text())
                 for i in range(2)]
        assert task["split"] == "test" and task["metric"] == "accuracy"
        assert task["scores"] == [result["test"]["accuracy"] for result in seeds]
        assert task["median"] == pytest.approx(statistics.median(task["scores"]))
        assert task["min"] <= task["median"] <= task["max"]
        assert task["floor"] == seeds[0]["baseline"]["test"]["accuracy"]
    sick_rows = seeds[0]["baseline"]["train_rows"]
    assert sick_rows == 60  # SemEval_set=TRAIN only: the task's config file was read
    average = summary["average"]
    assert average["median"] == pytest.approx(statistics.fmean(
        t["median"] for t in summary["tasks"]))
    assert average["floor"] == pytest.approx(statistics.fmean(
        t["floor"] for t in summary["tasks"]))
    assert "average_with_floor" not in summary
    table = (out / "suite.md").read_text()
    assert table in stdout
    assert f"| sick (pairs) | accuracy | test | {summary['tasks'][1]['median']:.4f} |" in table
    assert f"| average of 2 | | | {average['median']:.4f} |" in table


def test_a_task_without_a_floor_is_averaged_apart(run, sst2, wnut17, tmp_path, capsys):
    suite = tmp_path / "suite.yaml"
    suite.write_text(f"sst2: classify:{':'.join(sst2)}\nwnut17: ner:{':'.join(wnut17)}\n")
    out = tmp_path / "suite"
    code, stdout, _ = run_cli(capsys, "finetune", run, "--suite", suite, "--seeds", "1",
                              "--out", out, *FAST)
    assert code == 0
    summary = json.loads((out / "suite.json").read_text())
    sst, ner = summary["tasks"]
    assert (ner["metric"], ner["split"], ner["floor"]) == ("f1", "validation", None)
    assert ner["scores"] == [json.loads((out / "wnut17" / "results.json").read_text())
                             ["validation"]["f1"]]
    assert "floor" not in summary["average"]
    assert summary["average_with_floor"] == {"tasks": ["sst2"], "median": sst["median"],
                                             "floor": sst["floor"]}
    assert "| wnut17 (ner) | f1 | validation |" in stdout and "| – |" in stdout


def test_a_suite_file_is_the_flags_it_lists(sst2, sick, wnut17, tmp_path):
    entries = [f"sst2=classify:{':'.join(sst2)}", f"sick={sick}",
               f"wnut17=ner:{':'.join(wnut17)}"]
    suite = tmp_path / "suite.yaml"
    suite.write_text("".join(f"{name}: {entry}\n"
                             for name, _, entry in (e.partition("=") for e in entries)))
    from_file, from_flags = read_suite([str(suite)]), read_suite(entries)
    assert from_file == from_flags
    settings = {"epochs": 2.0, "lr": 1e-3, "out": str(tmp_path / "out")}
    assert suite_configs(from_file, settings) == suite_configs(from_flags, settings)
    configs = suite_configs(from_flags, settings)
    assert [(c.seeds, c.baseline, c.label_column, c.epochs) for c in configs] == [
        (5, "bow", None, 2.0), (5, "bow", "entailment_label", 2.0), (5, "none", None, 2.0)]


@pytest.mark.parametrize("entry, extra, message", [
    ("sst2", [], "--suite 'sst2': write NAME=TASK:TRAIN:VALIDATION[:TEST] or NAME=CONFIG.yaml"),
    ("sst2=classify:{train}", [], "--suite 'sst2=classify:"),
    ("sst2=tag:{train}:{dev}", [], "--suite sst2: unknown task 'tag'"),
    ("sst2=classify:{train}:missing.tsv", [], "--suite sst2: missing.tsv is not a file"),
    ("sst2=classify:{train}:{dev}", ["--label-column", "y"], "--label-column is one task's"),
    ("sst2=classify:{train}:{dev}", ["--suite", "sst2=classify:{train}:{dev}"],
     "--suite names sst2 more than once"),
    ("{sick}", [], "a fine-tuning config, not a suite file; name the task"),
])
def test_a_malformed_suite_is_refused_in_one_line(run, sst2, sick, tmp_path, capsys, entry,
                                                  extra, message):
    train, dev, _ = sst2

    def filled(text):
        return text.format(train=train, dev=dev, sick=sick)

    out = tmp_path / "suite"
    code, _, err = run_cli(capsys, "finetune", run, "--suite", filled(entry),
                           *map(filled, extra), "--out", out)
    assert code == 1
    assert err.startswith("lmlab: error: ") and err.count("\n") == 1
    assert message in err
    assert not out.exists()
