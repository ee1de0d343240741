"""The bag-of-words floor fine-tuning scores are read against (lmlab.tasks.bow_floor):
near 1.0 where words decide the label and near chance where labels are shuffled, for single
texts and for pairs; `lmlab finetune --baseline bow` prints it beside the model's score and
keeps it in results.json (fitted once for several seeds); tasks without a floor and a missing
scikit-learn are refused in one line; `lmlab compare` keeps a classification probe's floor in
comparison.json, the report page and the probe's figure, or says in one line that it left it
out."""

import json
import random
import sys

import pytest

import lmlab
from lmlab.compare import figures
from lmlab.config.training import TrainConfig
from lmlab.data.dataset import in_memory_dataset
from lmlab.data.preparation.tokenizer_training import train_tokenizer
from lmlab.data.tokenizer import special_tokens_of
from lmlab.finetune import entry
from lmlab.tasks.bow_floor import floor_of_config
from lmlab.tasks.finetune_config import FinetuneConfig
from lmlab.train.entry import pretrain
from tests.cli_process import lmlab as lmlab_command
from tests.cli_process import refused
from tests.test_compare import WORDS as COMPARE_WORDS
from tests.test_compare import world  # noqa: F401 — the comparison's synthetic language
from tests.test_finetune import conll_file, one_thread, run_cli, write_tsv  # noqa: F401

CUES = {"pos": ["good", "great", "fine"], "neg": ["bad", "awful", "poor"]}
FILLER = "the cat dog sees likes a bird runs home fast".split()
NOUNS = "cat dog bird fish horse mouse goat sheep".split()


def shuffled(rows: list[tuple], seed: int) -> list[tuple]:
    """The rows with their labels (first field) dealt out again at random: same labels, now
    independent of the texts."""
    labels = [row[0] for row in rows]
    random.Random(seed).shuffle(labels)
    return [(label, *row[1:]) for label, row in zip(labels, rows, strict=True)]


def cue_rows(count: int, seed: int) -> list[tuple[str, str]]:
    """(label, text): the label is which cue words the text holds, among filler."""
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        label = rng.choice(sorted(CUES))
        words = rng.choices(FILLER, k=rng.randint(3, 8))
        words.insert(rng.randint(0, len(words)), rng.choice(CUES[label]))
        rows.append((label, " ".join(words)))
    return rows


def overlap_rows(count: int, seed: int) -> list[tuple[str, str, str]]:
    """(label, A, B): "same" when the two texts name the same animal. Their other words never
    overlap, so only the words both texts share decide the label."""
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        a = rng.choice(NOUNS)
        label = rng.choice(["same", "different"])
        b = a if label == "same" else rng.choice([n for n in NOUNS if n != a])
        rows.append((label, f"the {a} runs home", f"a {b} sees it"))
    return rows


def floor_on(tmp_path, task: str, header: str, train: list, validation: list) -> dict:
    cfg = FinetuneConfig(task=task, train=write_tsv(tmp_path / "train.tsv", header, train),
                         validation=write_tsv(tmp_path / "dev.tsv", header, validation),
                         test=write_tsv(tmp_path / "test.tsv", header, validation[:50]),
                         baseline="bow")
    return floor_of_config(cfg)


@pytest.mark.parametrize("task, header, rows", [
    ("classify", "label\tsentence", cue_rows),
    ("pairs", "label\tsentence_A\tsentence_B", overlap_rows),
])
def test_the_floor_reads_words_and_nothing_else(tmp_path, task, header, rows):
    floor = floor_on(tmp_path, task, header, rows(300, 1), rows(400, 2))
    assert floor["name"] == "bag-of-words" and floor["main_metric"] == "accuracy"
    assert set(floor["validation"]) == set(floor["test"]) == {"accuracy", "macro_f1", "mcc"}
    assert floor["train_rows"] == 300
    # words decide the label (for pairs: the word both texts share)
    assert floor["validation"]["accuracy"] >= 0.95 and floor["test"]["accuracy"] >= 0.95
    # the same texts with their labels shuffled: nothing to learn, chance on held-out rows
    noise = floor_on(tmp_path, task, header, shuffled(rows(300, 1), 3),
                     shuffled(rows(400, 2), 4))
    assert abs(noise["validation"]["accuracy"] - 0.5) < 0.1
    assert abs(noise["validation"]["mcc"]) < 0.2


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    """A masked run, two pre-training steps: fine-tuning needs a backbone and a tokenizer."""
    rng = random.Random(0)
    words = FILLER + [w for cue in CUES.values() for w in cue]
    texts = [" ".join(rng.choices(words, k=rng.randint(5, 20))) + "." for _ in range(600)]
    tokenizer = train_tokenizer(texts, vocab_size=200, n_sentinels=4, kind="wordpiece")
    ids = [e.ids for e in tokenizer.encode_batch(texts)]
    dataset = in_memory_dataset(ids[:540], ids[540:], special_tokens_of(tokenizer))
    dataset.tokenizer_json = tokenizer.to_str()
    out = tmp_path_factory.mktemp("pretrained") / "mlm"
    return str(pretrain(TrainConfig(objective="mlm", model="bert-tiny", seq_len=32,
                                    out=str(out), batch_size=8, steps=2, eval_every=2),
                        dataset))


@pytest.fixture
def sentiment(tmp_path):
    return (write_tsv(tmp_path / "train.tsv", "label\tsentence", cue_rows(200, 1)),
            write_tsv(tmp_path / "dev.tsv", "label\tsentence", cue_rows(80, 2)))


FAST = ["--batch-size", "16", "--log-every", "1"]


def test_finetune_prints_and_keeps_the_floor_beside_the_model(pretrained, sentiment,
                                                              tmp_path):
    train, dev = sentiment
    test = write_tsv(tmp_path / "test.tsv", "label\tsentence", cue_rows(80, 3))
    out = tmp_path / "ft"
    shown = lmlab_command("finetune", pretrained, "--task", "classify", "--train", train,
                          "--validation", dev, "--test", test, "--baseline", "bow", "--steps",
                          "2", "--out", out, *FAST).stdout
    results = json.loads((out / "results.json").read_text())
    floor = results["baseline"]
    assert floor["validation"]["accuracy"] >= 0.95 and floor["train_rows"] == 200
    assert floor["test"]["accuracy"] >= 0.95  # rows of its own, scored apart
    model, (line,) = results["validation"]["accuracy"], [
        line for line in shown.splitlines() if line.startswith("bag-of-words floor")]
    # the printed floor is the saved one, beside the model's line, and says where the model
    # falls below it
    assert f"validation accuracy: {floor['validation']['accuracy']:.4f}" in line
    assert f"best validation accuracy: {model:.4f}" in shown
    assert ("below it on validation" in line) == (model < floor["validation"]["accuracy"])
    assert json.loads((out / "config.json").read_text())["train"]["baseline"] == "bow"


def test_several_seeds_fit_the_floor_once_and_summarise_it(pretrained, sentiment, tmp_path,
                                                           capsys, monkeypatch):
    fitted, fit_floor = [], entry.fit_floor

    def counted(task, splits):
        fitted.append(task)
        return fit_floor(task, splits)

    monkeypatch.setattr(entry, "fit_floor", counted)
    train, dev = sentiment
    out = tmp_path / "seeds"
    code, stdout, _ = run_cli(capsys, "finetune", pretrained, "--train", train, "--validation",
                              dev, "--baseline", "bow", "--steps", "1", "--seeds", "2",
                              "--out", out, *FAST)
    assert code == 0 and len(fitted) == 1
    summary = json.loads((out / "seeds.json").read_text())
    for seed in ("seed-0", "seed-1"):
        assert json.loads((out / seed / "results.json").read_text())["baseline"] == \
            summary["baseline"]
    lines = [line for line in stdout.splitlines() if line.startswith("bag-of-words floor")]
    assert len(lines) == 3  # each seed's run, then the summary
    mean = summary["validation"]["accuracy"]["mean"]
    assert ("below it on validation" in lines[-1]) == (
        mean < summary["baseline"]["validation"]["accuracy"])


@pytest.mark.parametrize("task", ["ner", "regress"])
def test_a_task_without_a_floor_is_refused_in_one_line(pretrained, tmp_path, task):
    data = (conll_file(tmp_path / "ner.conll", [[("Anna", "B-PER"), ("runs", "O")]] * 4)
            if task == "ner" else write_tsv(tmp_path / "scores.tsv", "text\tscore",
                                            [("good cat", 1), ("bad dog", 0)]))
    out = tmp_path / "ft"
    line = refused("finetune", pretrained, "--task", task, "--train", data, "--validation",
                   data, "--baseline", "bow", "--out", out)
    assert "--baseline bow fits one label per text, for the classify and pairs tasks" in line
    assert f"{task} has no bag-of-words floor" in line
    assert not out.exists()


def test_a_missing_scikit_learn_is_named_with_its_extra(pretrained, sentiment, tmp_path,
                                                       capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "sklearn", None)  # as if it were not installed
    train, dev = sentiment
    out = tmp_path / "ft"
    code, stdout, err = run_cli(capsys, "finetune", pretrained, "--train", train,
                                "--validation", dev, "--baseline", "bow", "--out", out)
    assert code == 1 and stdout == ""
    assert err.strip() == ("lmlab: error: --baseline bow needs the scikit-learn package: "
                           "pip install 'lmlab[baselines]'")
    assert not out.exists()


def probe_rows(count: int, seed: int) -> list[tuple[str, str]]:
    """(label, text) in the comparison's language: the label is whether "cat" or "dog"
    was put among the other words."""
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        label = rng.choice(["cat", "dog"])
        words = rng.choices(COMPARE_WORDS[2:], k=6)
        words.insert(rng.randint(0, 6), label)
        rows.append((label, " ".join(words)))
    return rows


def test_compare_keeps_each_classification_probes_floor(world, tmp_path, capsys,  # noqa: F811
                                                        monkeypatch):
    drawn = {}
    monkeypatch.setattr(figures, "save_png", lambda figure, path: drawn.update({path.name:
                                                                                 figure}))
    train = write_tsv(tmp_path / "train.tsv", "label\ttext", probe_rows(200, 1))
    dev = write_tsv(tmp_path / "dev.tsv", "label\ttext", probe_rows(100, 2))
    out = tmp_path / "lab"
    options = dict(budget=2, data=world["data"], match="steps", fractions="1", seeds=1,
                   model="gpt2-tiny", seq_len=32, batch_size=16, eval_tokens=2000,
                   probes=[f"cue=classify:{train}:{dev}"], probe_epochs=0.2, out=str(out),
                   progress=False)
    lmlab.compare_objectives("mlm,clm", **options)
    record = json.loads((out / "comparison.json").read_text())
    floor = record["baselines"]["probe cue (accuracy)"]
    assert (floor["probe"], floor["split"], floor["metric"]) == ("cue", "validation",
                                                                 "accuracy")
    assert floor["value"] == floor["floor"]["validation"]["accuracy"] >= 0.95
    assert floor["floor"]["train_rows"] == 200
    assert f"probe cue (accuracy): {floor['value']:.4f} on validation" in capsys.readouterr().out
    page = (out / "report.html").read_text()
    assert ("<td>probe cue (accuracy)</td><td>validation</td>"
            f"<td>{floor['value']:.4g}</td>") in page
    for name in ("probes.png", "curves.png"):
        axis = next(a for a in drawn[name].axes if a.get_title().startswith("probe cue"))
        (line,) = [line for line in axis.get_lines() if line.get_label() == "bag-of-words"]
        assert set(line.get_ydata()) == {floor["value"]}

    # without scikit-learn the comparison still runs, and says in one line what it left out
    monkeypatch.setitem(sys.modules, "sklearn", None)
    lmlab.compare_objectives("mlm,clm", **options)
    said = [line for line in capsys.readouterr().err.splitlines() if "bag-of-words" in line]
    assert said == ["the bag-of-words floor of probe cue needs the scikit-learn package: "
                    "pip install 'lmlab[baselines]'; left out of the comparison"]
    record = json.loads((out / "comparison.json").read_text())
    assert record["baselines"] == {} and "lmlab[baselines]" in record["baselines_left_out"]
    assert "Left out: the bag-of-words floor" in (out / "report.html").read_text()
