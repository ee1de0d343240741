"""`lmlab finetune` and `lmlab predict` as a user meets them: every task from files, the run
directory it leaves, predictions in the shapes of the Hugging Face pipelines, several seeds,
and one-line errors for bad input."""

import json
import random

import pytest
import torch

from lmlab.cli import main
from lmlab.config.training import TrainConfig
from lmlab.data.dataset import in_memory_dataset
from lmlab.data.preparation.tokenizer_training import train_tokenizer
from lmlab.data.tokenizer import special_tokens_of
from lmlab.runs.run import load_run
from lmlab.train.entry import pretrain

WORDS = ["the", "cat", "dog", "sees", "likes", "a", "bird", "runs", "home", "fast", "Paris",
         "Berlin", "Anna", "Tom", "lives", "in", "good", "bad"]
CONTEXT = 48


def words_dataset(words: list[str], texts: int, held_out: int, longest: int, vocab_size: int):
    """Seeded sentences of `words` (5 to `longest` each), tokenised in memory by a WordPiece
    tokenizer trained on them, its tokenizer.json kept; the last `held_out` validate."""
    rng = random.Random(0)
    sentences = [" ".join(rng.choice(words) for _ in range(rng.randint(5, longest))) + "."
                 for _ in range(texts)]
    tokenizer = train_tokenizer(sentences, vocab_size=vocab_size, n_sentinels=4,
                                kind="wordpiece")
    ids = [e.ids for e in tokenizer.encode_batch(sentences)]
    dataset = in_memory_dataset(ids[:-held_out], ids[-held_out:], special_tokens_of(tokenizer))
    dataset.tokenizer_json = tokenizer.to_str()
    return dataset


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A masked and a causal run, two pre-training steps each: fine-tuning needs only a
    backbone and a tokenizer."""
    root = tmp_path_factory.mktemp("pretrained")
    dataset = words_dataset(WORDS, texts=1500, held_out=100, longest=30, vocab_size=300)
    made = {}
    for objective, model in [("mlm", "bert-tiny"), ("clm", "gpt2-tiny")]:
        config = TrainConfig(objective=objective, model=model, seq_len=CONTEXT,
                             out=str(root / objective), batch_size=8, steps=2, eval_every=2)
        made[objective] = str(pretrain(config, dataset))
    return made


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: one thread is faster on a busy machine
    yield
    torch.set_num_threads(threads)


def run_cli(capsys, *args):
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def sentiment_rows(count: int, seed: int) -> list[tuple[str, str]]:
    """(label, text): the label is which of "good"/"bad" the text holds."""
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        words = [rng.choice(WORDS[:10]) for _ in range(rng.randint(3, 8))]
        label = rng.choice(["pos", "neg"])
        words.insert(rng.randint(0, len(words)), "good" if label == "pos" else "bad")
        rows.append((label, " ".join(words)))
    return rows


def write_tsv(path, header: str, rows) -> str:
    path.write_text(header + "\n" + "".join("\t".join(map(str, r)) + "\n" for r in rows))
    return str(path)


@pytest.fixture
def sentiment(tmp_path):
    return (write_tsv(tmp_path / "train.tsv", "label\tsentence", sentiment_rows(200, 1)),
            write_tsv(tmp_path / "dev.tsv", "label\tsentence", sentiment_rows(40, 2)))


@pytest.fixture
def held_out(tmp_path):
    """Test rows apart from the validation rows that choose the best checkpoint."""
    return write_tsv(tmp_path / "test.tsv", "label\tsentence", sentiment_rows(40, 3))


FAST = ["--batch-size", "16", "--lr", "2e-3", "--log-every", "5"]


def test_classify_learns_and_the_run_predicts_at_once(runs, sentiment, held_out, tmp_path,
                                                      capsys):
    train, dev = sentiment
    out = tmp_path / "ft"
    code, stdout, _ = run_cli(capsys, "finetune", runs["mlm"], "--task", "classify", "--train",
                              train, "--validation", dev, "--test", held_out, "--out", out,
                              "--epochs", "4", *FAST)
    assert code == 0
    assert "bidirectional attention, mean pooling" in stdout
    results = json.loads((out / "results.json").read_text())
    assert results["validation"]["accuracy"] >= 0.9
    assert set(results["test"]) == {"accuracy", "macro_f1", "mcc"}
    for name in ("curves.png", "confusion-validation.png", "predictions-test.jsonl"):
        assert (out / name).stat().st_size > 0
    saved = json.loads((out / "config.json").read_text())
    assert saved["task"]["labels"] == ["neg", "pos"]
    assert (saved["train"]["attention"], saved["train"]["pooling"]) == ("bidirectional", "mean")

    code, stdout, _ = run_cli(capsys, "predict", out, "--json", "--all-scores",
                              "the cat good runs", "a dog bad")
    assert code == 0
    first, second = (json.loads(line) for line in stdout.splitlines())
    assert (first["label"], second["label"]) == ("pos", "neg")
    assert set(first["scores"]) == {"neg", "pos"}
    assert abs(sum(first["scores"].values()) - 1) < 1e-5
    assert first["score"] == max(first["scores"].values())


def train_steps(out) -> list[int]:
    return [record["step"] for record in map(json.loads, (out / "metrics.jsonl").open())
            if record["kind"] == "train"]


def test_a_time_budget_ends_fine_tuning_by_its_deadline(runs, sentiment, tmp_path, capsys):
    """--minutes as pre-training keeps it: the steps planned from a timed step, re-estimated
    from the pace as they come, far fewer than the epochs asked for."""
    train, dev = sentiment
    out = tmp_path / "ft"
    code, stdout, _ = run_cli(capsys, "finetune", runs["mlm"], "--task", "classify", "--train",
                              train, "--validation", dev, "--out", out, "--epochs", "1000",
                              "--minutes", "0.05", *FAST)
    assert code == 0
    assert "timing one training step to fit the run into 0.05 minutes\n" in stdout
    saved = json.loads((out / "config.json").read_text())["train"]
    assert (saved["minutes"], saved["epochs"]) == (0.05, 1000)
    steps = train_steps(out)
    epochs_allow = 1000 * 13  # 200 rows, 16 a step
    assert 0 < steps[-1] < epochs_allow
    assert (out / "results.json").is_file()  # scored as any fine-tuned run


def test_a_causal_run_keeps_causal_attention_and_pools_its_last_token(runs, sentiment,
                                                                     tmp_path, capsys):
    train, dev = sentiment
    code, stdout, _ = run_cli(capsys, "finetune", runs["clm"], "--train", train,
                              "--validation", dev, "--out", tmp_path / "ft", "--steps", "4",
                              *FAST)
    assert code == 0
    assert "causal attention, last pooling" in stdout
    assert "note:" not in stdout  # it exports as it is
    run = load_run(tmp_path / "ft")
    assert set(run.model.heads) == {"classify"}
    # GPT's head (HF's GPT2/LlamaForSequenceClassification): a bias-free linear layer alone,
    # recorded so that predict, serve and export rebuild it
    assert set(run.model.heads["classify"].state_dict()) == {"classifier.weight"}
    assert run.task.head_options == {"num_labels": 2, "pooler": False}


def test_pairs_read_two_texts_with_token_types(runs, tmp_path, capsys):
    rng = random.Random(3)
    rows = []
    for _ in range(80):
        a, b = rng.choice(WORDS), rng.choice(WORDS)
        rows.append((f"the {a} runs", f"the {b} runs", "same" if a == b else "different"))
    data = write_tsv(tmp_path / "pairs.tsv", "sentence_A\tsentence_B\tlabel", rows)
    code, stdout, _ = run_cli(capsys, "finetune", runs["mlm"], "--task", "pairs", "--train",
                              data, "--validation", data, "--out", tmp_path / "ft", "--steps",
                              "3", *FAST)
    assert code == 0, stdout
    code, stdout, _ = run_cli(capsys, "predict", tmp_path / "ft", "--json",
                              "the cat runs ||| the dog runs")
    assert json.loads(stdout)["label"] in ("same", "different")


@pytest.mark.slow
def test_regression_scores_pearson_and_predicts_numbers(runs, tmp_path, capsys):
    rng = random.Random(4)
    rows = [(" ".join(["good"] * n + ["cat"] * (5 - n)), n) for n in
            (rng.randint(0, 5) for _ in range(120))]
    data = write_tsv(tmp_path / "scores.tsv", "text\tscore", rows)
    out = tmp_path / "ft"
    code, _, _ = run_cli(capsys, "finetune", runs["mlm"], "--task", "regress", "--train", data,
                         "--validation", data, "--out", out, "--epochs", "6", *FAST)
    assert code == 0
    results = json.loads((out / "results.json").read_text())
    assert results["validation"]["pearson"] > 0.5
    code, stdout, _ = run_cli(capsys, "predict", out, "--json", "good good good cat cat")
    assert isinstance(json.loads(stdout)["score"], float)


def squad_file(path, contexts) -> str:
    paragraphs = []
    for index, (context, question, answer) in enumerate(contexts):
        start = context.index(answer)
        paragraphs.append({"context": context, "qas": [{
            "id": f"q{index}", "question": question,
            "answers": [{"text": answer, "answer_start": start}]}]})
    path.write_text(json.dumps({"version": "1.1", "data": [{"title": "t",
                                                              "paragraphs": paragraphs}]}))
    return str(path)


def test_qa_answers_with_character_spans(runs, tmp_path, capsys):
    rng = random.Random(5)
    contexts = []
    for _ in range(60):
        name, city = rng.choice(["Anna", "Tom"]), rng.choice(["Paris", "Berlin"])
        filler = " ".join(rng.choice(WORDS[:10]) for _ in range(rng.randint(2, 12)))
        contexts.append((f"{filler} {name} lives in {city} .", f"where does {name} live ?",
                         city))
    data = squad_file(tmp_path / "qa.json", contexts)
    out = tmp_path / "ft"
    code, stdout, _ = run_cli(capsys, "finetune", runs["mlm"], "--task", "qa", "--train", data,
                              "--validation", data, "--out", out, "--epochs", "2",
                              "--max-len", "24", "--doc-stride", "4", *FAST)
    assert code == 0, stdout
    assert set(json.loads((out / "results.json").read_text())["validation"]) == {
        "exact_match", "f1"}
    context = "the cat runs home fast a bird sees the dog and Anna lives in Paris ."
    code, stdout, _ = run_cli(capsys, "predict", out, "--json",
                              f"where does Anna live ? ||| {context}")
    answer = json.loads(stdout)
    assert context[answer["start"]:answer["end"]] == answer["answer"]
    assert 0 <= answer["score"] <= 1


def conll_file(path, sentences) -> str:
    path.write_text("".join("".join(f"{w}\t{t}\n" for w, t in s) + "\n" for s in sentences))
    return str(path)


def test_ner_tags_words_and_groups_entities(runs, tmp_path, capsys):
    rng = random.Random(6)
    sentences = []
    for _ in range(120):
        sentence = [(w, "O") for w in rng.sample(WORDS[:10], 3)]
        sentence.insert(rng.randint(0, 3), (rng.choice(["Anna", "Tom"]), "B-PER"))
        sentence.append((rng.choice(["Paris", "Berlin"]), "B-LOC"))
        sentences.append(sentence)
    data = conll_file(tmp_path / "ner.conll", sentences)
    test = conll_file(tmp_path / "ner-test.conll", sentences[::-1])  # not the validation file
    out = tmp_path / "ft"
    code, _, _ = run_cli(capsys, "finetune", runs["mlm"], "--task", "ner", "--train", data,
                         "--validation", data, "--test", test, "--out", out, "--epochs", "5",
                         *FAST)
    assert code == 0
    results = json.loads((out / "results.json").read_text())
    assert results["test"]["f1"] > 0.8
    predicted = (out / "predictions-test.conll").read_text().split("\n\n")[0].splitlines()
    assert [line.split("\t")[:2] for line in predicted] == [list(p) for p in sentences[-1]]
    text = "  ".join(word for word, _ in sentences[0])  # raw text, split again by predict
    code, stdout, _ = run_cli(capsys, "predict", out, "--json", text)
    entities = json.loads(stdout)["entities"]
    expected = {(tag[2:], word) for word, tag in sentences[0] if tag != "O"}
    assert {(e["entity_group"], e["word"]) for e in entities} == expected
    assert all(text[e["start"]:e["end"]] == e["word"] for e in entities)


@pytest.mark.slow
@pytest.mark.parametrize("same", ["path", "copy"])
def test_a_test_that_is_the_validation_data_is_not_scored_as_a_test(runs, sentiment, tmp_path,
                                                                     capsys, same):
    train, dev = sentiment
    test = dev
    if same == "copy":  # the same rows under another name
        test = tmp_path / "copy.tsv"
        test.write_bytes((tmp_path / "dev.tsv").read_bytes())
    out = tmp_path / "ft"
    code, _, err = run_cli(capsys, "finetune", runs["mlm"], "--train", train, "--validation",
                           dev, "--test", test, "--out", out, "--steps", "1", *FAST)
    assert code == 0
    warning = [line for line in err.splitlines() if "same data as --validation" in line]
    assert len(warning) == 1
    results = json.loads((out / "results.json").read_text())
    assert "validation" in results and "test" not in results
    assert not (out / "predictions-test.jsonl").exists()


def test_a_test_with_other_rows_of_the_same_file_is_scored(runs, sentiment, tmp_path, capsys):
    train, _ = sentiment
    rows = sentiment_rows(40, 2)
    data = write_tsv(tmp_path / "both.tsv", "label\tsentence\tpart",
                     [(*row, "dev" if i % 2 else "test") for i, row in enumerate(rows)])
    out = tmp_path / "ft"
    code, _, err = run_cli(capsys, "finetune", runs["mlm"], "--train", train, "--validation",
                           data, "--validation-where", "part=dev", "--test", data,
                           "--test-where", "part=test", "--out", out, "--steps", "1", *FAST)
    assert code == 0 and "same data" not in err
    results = json.loads((out / "results.json").read_text())
    assert "test" in results


@pytest.mark.slow
def test_several_seeds_report_mean_and_deviation(runs, sentiment, tmp_path, capsys):
    train, dev = sentiment
    out = tmp_path / "seeds"
    code, stdout, _ = run_cli(capsys, "finetune", runs["mlm"], "--train", train,
                              "--validation", dev, "--out", out, "--steps", "3", "--seeds",
                              "2", *FAST)
    assert code == 0
    summary = json.loads((out / "seeds.json").read_text())
    accuracy = summary["validation"]["accuracy"]
    assert len(accuracy["values"]) == 2 and summary["seeds"] == [0, 1]
    assert accuracy["mean"] == pytest.approx(sum(accuracy["values"]) / 2)
    assert "±" in stdout
    assert (out / "seed-1" / "results.json").is_file()


@pytest.mark.slow
def test_early_stopping_ends_the_run_before_its_last_step(runs, tmp_path, capsys):
    rows = [(random.Random(i).choice(["a", "b"]), "the cat runs") for i in range(64)]
    data = write_tsv(tmp_path / "noise.tsv", "label\ttext", rows)
    out = tmp_path / "ft"
    code, stdout, _ = run_cli(capsys, "finetune", runs["mlm"], "--train", data, "--validation",
                              data, "--out", out, "--epochs", "20", "--patience", "1",
                              "--eval-every", "1", *FAST)
    assert code == 0
    assert "stopping early" in stdout
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").open()]
    assert max(steps) < 20 * 4


@pytest.mark.parametrize("case", ["missing column", "unseen label", "not a number",
                                  "empty file", "conll columns"])
def test_bad_input_is_one_line_naming_file_and_line(runs, tmp_path, capsys, case):
    train = write_tsv(tmp_path / "train.tsv", "label\ttext", [("a", "x y"), ("b", "y z")])
    task, validation = "classify", train
    if case == "missing column":
        train = write_tsv(tmp_path / "bad.tsv", "lbl\ttext", [("a", "x y")])
        expected = "bad.tsv:1:"
    elif case == "unseen label":
        validation = write_tsv(tmp_path / "dev.tsv", "label\ttext", [("a", "x"), ("c", "y")])
        expected = "dev.tsv:3: label 'c' never seen in training"
    elif case == "not a number":
        task = "regress"
        train = write_tsv(tmp_path / "bad.tsv", "score\ttext", [("1.5", "x"), ("high", "y")])
        expected = "bad.tsv:3:"
    elif case == "empty file":
        (tmp_path / "empty.tsv").write_text("")
        train = str(tmp_path / "empty.tsv")
        expected = "empty.tsv"
    else:
        task = "ner"
        train = conll_file(tmp_path / "bad.conll", [[("Anna", "B-PER")], [("x", "O\tO")]])
        expected = "bad.conll:3:"
    code, _, err = run_cli(capsys, "finetune", runs["mlm"], "--task", task, "--train", train,
                           "--validation", validation, "--out", tmp_path / "ft")
    assert code == 1
    assert len(err.strip().splitlines()) == 1 and expected in err, err
    assert not (tmp_path / "ft").exists()


def test_errors_for_runs_and_contexts_that_cannot_serve(runs, sentiment, tmp_path, capsys):
    code, _, err = run_cli(capsys, "predict", runs["mlm"], "some text")
    assert code == 1 and "is not fine-tuned" in err
    train, dev = sentiment
    code, _, err = run_cli(capsys, "finetune", runs["mlm"], "--task", "pairs", "--train", train,
                           "--validation", dev, "--pair-column", "sentence", "--max-len", "4",
                           "--out", tmp_path / "ft")
    assert code == 1 and "needs at least 5 tokens per row" in err and "is 4" in err
