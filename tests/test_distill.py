"""`lmlab distill`: the soft-label loss against a hand computation, students cut from the
teacher keep its weights exactly, and a distilled run is an ordinary run that predicts; bad
input is one line."""

import json
import math

import pytest
import torch

from lmlab.cli import main
from lmlab.config.presets import preset
from lmlab.distill.losses import number_loss, soft_label_loss
from lmlab.distill.student import cut_from, kept_layers
from lmlab.model import LanguageModel
from lmlab.model.heads import make_head
from tests.test_finetune import CONTEXT, runs, sentiment, sentiment_rows, write_tsv  # noqa: F401


def test_soft_label_loss_is_temperature_squared_kl():
    student = torch.tensor([[1.0, -0.5, 0.2], [0.0, 2.0, -1.0]])
    teacher = torch.tensor([[2.0, 0.0, -1.0], [0.5, 0.5, 0.0]])
    temperature = 2.0
    expected = 0.0
    for s_row, t_row in zip(student.tolist(), teacher.tolist(), strict=True):
        s_exp = [math.exp(v / temperature) for v in s_row]
        t_exp = [math.exp(v / temperature) for v in t_row]
        q = [v / sum(s_exp) for v in s_exp]
        p = [v / sum(t_exp) for v in t_exp]
        expected += sum(pi * math.log(pi / qi) for pi, qi in zip(p, q, strict=True))
    expected *= temperature ** 2
    assert float(soft_label_loss(student, teacher, temperature)) == pytest.approx(expected)
    assert float(soft_label_loss(teacher, teacher, temperature)) == pytest.approx(0, abs=1e-6)


def test_number_loss_is_the_summed_squared_difference():
    assert float(number_loss(torch.tensor([[1.0], [3.0]]), torch.tensor([0.5, 1.0]))) == 4.25


@pytest.mark.parametrize("total, keep, layers", [(6, 2, [0, 5]), (6, 3, [0, 2, 5]),
                                                 (12, 4, [0, 4, 7, 11]), (4, 1, [3])])
def test_kept_layers_are_evenly_spaced(total, keep, layers):
    assert kept_layers(total, keep) == layers


def test_kept_layers_refuses_more_than_the_teacher_has():
    with pytest.raises(ValueError, match="keep 1 to 4"):
        kept_layers(4, 5)


def test_a_cut_student_keeps_the_chosen_layers_weights_exactly():
    torch.manual_seed(0)
    cfg = preset("bert-tiny", 100, 32).with_changes(n_layers=4)
    heads = lambda shape: {"classify": make_head("classify", shape, num_labels=3)}  # noqa: E731
    teacher = LanguageModel(cfg, heads=heads(cfg))
    student = cut_from(teacher, 2, heads)
    assert student.cfg.n_layers == 2
    theirs, ours = teacher.state_dict(), student.state_dict()
    for index, layer in enumerate([0, 3]):
        for key, tensor in teacher.backbone.blocks[layer].state_dict().items():
            assert torch.equal(ours[f"backbone.blocks.{index}.{key}"], tensor)
    for key in ours:
        if not key.startswith("backbone.blocks."):
            assert torch.equal(ours[key], theirs[key]), key


def run_cli(capsys, *args):
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def teacher(runs, tmp_path_factory):  # noqa: F811
    """A 2-layer masked run fine-tuned as a sentiment classifier."""
    root = tmp_path_factory.mktemp("teacher")
    train = write_tsv(root / "train.tsv", "label\tsentence", sentiment_rows(200, 1))
    dev = write_tsv(root / "dev.tsv", "label\tsentence", sentiment_rows(40, 2))
    out = root / "teacher"
    assert main([str(a) for a in ("finetune", runs["mlm"], "--task", "classify", "--train",
                                  train, "--validation", dev, "--out", out, "--epochs", "3",
                                  "--batch-size", "16", "--lr", "2e-3")]) == 0
    return out, train, dev


def test_a_distilled_run_predicts_as_any_fine_tuned_run(teacher, tmp_path, capsys):
    path, train, dev = teacher
    unlabelled = tmp_path / "unlabelled.txt"
    unlabelled.write_text("".join(text + "\n" for _, text in sentiment_rows(60, 7)))
    out = tmp_path / "student"
    code, stdout, _ = run_cli(capsys, "distill", path, "--layers", "1", "--train", train,
                              "--validation", dev, "--unlabelled", unlabelled, "--out", out,
                              "--epochs", "2", "--batch-size", "16", "--lr", "2e-3")
    assert code == 0, stdout
    assert "1-layer student" in stdout and "260 rows" in stdout
    saved = json.loads((out / "config.json").read_text())
    assert saved["model"]["n_layers"] == 1 and saved["task"]["labels"] == ["neg", "pos"]
    code, stdout, _ = run_cli(capsys, "predict", out, "--json", "the cat good", "a dog bad")
    assert code == 0
    assert {json.loads(line)["label"] for line in stdout.splitlines()} <= {"pos", "neg"}


def test_a_time_budget_ends_distillation_and_the_teacher_scores_with_a_progress_bar(
        teacher, tmp_path, capsys):
    path, train, dev = teacher
    out = tmp_path / "student"
    code, stdout, err = run_cli(capsys, "distill", path, "--layers", "1", "--train", train,
                                "--validation", dev, "--out", out, "--epochs", "1000",
                                "--minutes", "0.05", "--batch-size", "16", "--lr", "2e-3")
    assert code == 0, err
    # the teacher's pass over the rows before training says how far it is
    assert "teacher scores: 100%" in err
    assert "timing one training step to fit the run into 0.05 minutes\n" in stdout
    assert json.loads((out / "config.json").read_text())["train"]["minutes"] == 0.05
    steps = [record["step"] for record in map(json.loads, (out / "metrics.jsonl").open())
             if record["kind"] == "train"]
    assert 0 < steps[-1] < 1000 * 13  # 200 rows, 16 a step: far fewer than the epochs


def test_a_narrowed_student_predicts(teacher, tmp_path, capsys):
    path, train, dev = teacher
    out = tmp_path / "narrow"
    code, stdout, err = run_cli(capsys, "distill", path, "--layers", "1", "--width", "0.5",
                                "--train", train, "--validation", dev, "--out", out, "--steps",
                                "2", "--batch-size", "16")
    assert code == 0, err
    saved = json.loads((out / "config.json").read_text())["model"]
    assert (saved["n_heads"], saved["ffn_size"]) == (1, 128)
    assert run_cli(capsys, "predict", out, "the cat good")[0] == 0


def test_a_preset_student_trains_from_scratch(teacher, tmp_path, capsys):
    path, train, dev = teacher
    code, stdout, _ = run_cli(capsys, "distill", path, "--student", "modern-tiny", "--train",
                              train, "--validation", dev, "--out", tmp_path / "s", "--steps",
                              "2", "--batch-size", "16")
    assert code == 0 and "2-layer student, d=64" in stdout


@pytest.mark.parametrize("extra, message", [
    ([], "give the student as --layers N"),
    (["--layers", "1", "--student", "bert-tiny"], "one of them"),
    (["--layers", "9"], "keep 1 to 2"),
    (["--student", "bert-tiny", "--width", "0.5"], "--width takes a share"),
])
def test_bad_input_is_one_line(teacher, tmp_path, capsys, extra, message):
    path, train, dev = teacher
    code, _, err = run_cli(capsys, "distill", path, "--train", train, "--validation", dev,
                           "--out", tmp_path / "s", *extra)
    assert code != 0 and message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "s").exists()


def test_a_teacher_must_be_fine_tuned(runs, sentiment, tmp_path, capsys):  # noqa: F811
    train, dev = sentiment
    code, _, err = run_cli(capsys, "distill", runs["mlm"], "--layers", "1", "--train", train,
                           "--validation", dev, "--out", tmp_path / "s")
    assert code == 1 and "not fine-tuned" in err and len(err.strip().splitlines()) == 1


def test_relations_are_the_softmax_of_scaled_self_products():
    from lmlab.distill.signals import relation_loss, relations

    torch.manual_seed(0)
    qkv = torch.randn(1, 3, 3 * 4)  # q, k, v of one head of width 4, 3 tokens
    real = torch.tensor([[True, True, False]])
    found = relations(qkv, (1, 1, 1), 4, 2, real)  # two relation heads of width 2
    assert found.shape == (3, 1, 2, 3, 3)
    q = qkv[0, :, :4]
    first = q[:, :2] @ q[:, :2].T / math.sqrt(2)
    first[:, 2] = -1e4  # the padding key
    assert torch.allclose(found[0, 0, 0], first.log_softmax(-1), atol=1e-6)
    assert float(relation_loss(found, found, real)) == pytest.approx(0, abs=1e-6)
    other = relations(torch.randn(1, 3, 12), (1, 1, 1), 4, 2, real)
    assert float(relation_loss(other, found, real)) > 0


@pytest.fixture(scope="module")
def prepared(runs, tmp_path_factory):  # noqa: F811
    """Text prepared with the masked run's tokenizer."""
    root = tmp_path_factory.mktemp("general")
    lines = [" ".join(words) for _, words in sentiment_rows(400, 5)]
    (root / "text.jsonl").write_text("".join(json.dumps({"text": f"{a}. {b}."}) + "\n"
                                             for a, b in zip(lines[::2], lines[1::2], strict=True)))
    assert main(["prepare", str(root / "text.jsonl"), "--tokenizer", runs["mlm"], "--out",
                 str(root / "data")]) == 0
    return root / "data"


@pytest.mark.parametrize("imitate", ["both", "relations"])
def test_general_distillation_gives_a_pre_trained_run(runs, prepared, tmp_path, capsys,  # noqa: F811
                                                      imitate):
    out = tmp_path / "student"
    code, stdout, err = run_cli(capsys, "distill", runs["mlm"], "--data", prepared, "--layers",
                                "1", "--imitate", imitate, "--steps", "3", "--batch-size", "4",
                                "--seq-len", "32", "--out", out)
    assert code == 0, err
    assert "1-layer student" in stdout
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert any("distill/relations_loss" in row for row in metrics)
    from lmlab.runs import load_run

    run = load_run(out)
    assert run.model.cfg.n_layers == 1
    assert set(run.model.heads) == ({"mlm"} if imitate == "both" else set())
    code, _, err = run_cli(capsys, "embed", out, "a cat good", "--out", tmp_path / "v.npy")
    assert code == 0, err


def test_general_distillation_refuses_data_of_another_tokenizer(runs, tmp_path, capsys):  # noqa: F811
    (tmp_path / "t.jsonl").write_text("".join(json.dumps({"text": f"words {i} here."}) + "\n"
                                              for i in range(200)))
    assert main(["prepare", str(tmp_path / "t.jsonl"), "--vocab-size", "120", "--out",
                 str(tmp_path / "other")]) == 0
    capsys.readouterr()
    code, _, err = run_cli(capsys, "distill", runs["mlm"], "--data", tmp_path / "other",
                           "--layers", "1", "--out", tmp_path / "s")
    assert code == 1 and "teacher's tokenizer" in err and len(err.strip().splitlines()) == 1


def masked_teacher(teacher: LanguageModel, student: LanguageModel) -> LanguageModel:
    """The teacher with the pruned heads' output columns and the pruned neurons' output
    columns zeroed, which computes what the narrow student computes."""
    import copy

    masked = copy.deepcopy(teacher)
    dim = teacher.cfg.head_dim
    for wide, narrow in zip(masked.backbone.blocks, student.backbone.blocks, strict=True):
        out = wide.attn.out.weight.detach()
        kept = {i for i in range(teacher.cfg.n_heads) for j in range(student.cfg.n_heads)
                if torch.equal(out[:, i * dim:(i + 1) * dim],
                               narrow.attn.out.weight.detach()[:, j * dim:(j + 1) * dim])}
        with torch.no_grad():
            for head in set(range(teacher.cfg.n_heads)) - kept:
                wide.attn.out.weight[:, head * dim:(head + 1) * dim] = 0
            down = wide.mlp.down.weight
            keep = [any(torch.equal(down[:, i], narrow.mlp.down.weight[:, j])
                        for j in range(student.cfg.ffn_dim)) for i in range(down.shape[1])]
            down[:, [i for i, k in enumerate(keep) if not k]] = 0
    return masked


@pytest.mark.parametrize("family", ["bert-tiny", "modern-tiny"])
def test_pruning_keeps_the_important_units_and_their_function(family):
    from lmlab.distill.prune import prune_width
    from lmlab.model import MaskSpec

    torch.manual_seed(0)
    cfg = preset(family, 100, 32).with_changes(n_heads=4, dropout=0.0)
    heads = lambda shape: {"classify": make_head("classify", shape, num_labels=2)}  # noqa: E731
    teacher = LanguageModel(cfg, heads=heads(cfg)).eval()
    ids = torch.randint(5, 100, (2, 10))
    mask = MaskSpec("bidirectional")
    same = prune_width(teacher, 1.0, heads).eval()
    assert torch.equal(same(ids, mask)["classify"], teacher(ids, mask)["classify"])
    narrow = prune_width(teacher, 0.5, heads).eval()
    assert (narrow.cfg.n_heads, narrow.cfg.ffn_dim) == (2, cfg.ffn_dim // 2)
    expected = masked_teacher(teacher, narrow)(ids, mask)["classify"]
    assert torch.allclose(narrow(ids, mask)["classify"], expected, atol=1e-5)


def test_pruning_keeps_the_heaviest_head_and_neuron():
    from lmlab.distill.prune import prune_width

    torch.manual_seed(0)
    cfg = preset("bert-tiny", 100, 32).with_changes(n_heads=4)
    heads = lambda shape: {}  # noqa: E731
    teacher = LanguageModel(cfg, heads=heads(cfg))
    block = teacher.backbone.blocks[0]
    with torch.no_grad():
        block.attn.out.weight[:, 48:64] *= 10  # head 3 (of width 16)
        block.mlp.down.weight[:, 7] *= 10
    narrow = prune_width(teacher, 0.25, heads)
    assert torch.equal(narrow.backbone.blocks[0].attn.out.weight, block.attn.out.weight[:, 48:])
    kept = narrow.backbone.blocks[0].mlp.down.weight
    assert any(torch.equal(kept[:, j], block.mlp.down.weight[:, 7]) for j in range(64))


def test_a_tagger_distils_token_by_token(runs, tmp_path, capsys):  # noqa: F811
    import random

    from tests.test_finetune import WORDS, conll_file

    rng = random.Random(6)
    sentences = []
    for _ in range(80):
        sentence = [(w, "O") for w in rng.sample(WORDS[:10], 3)]
        sentence.insert(rng.randint(0, 3), (rng.choice(["Anna", "Tom"]), "B-PER"))
        sentences.append(sentence)
    data = conll_file(tmp_path / "ner.conll", sentences)
    teacher = tmp_path / "tagger"
    assert main([str(a) for a in ("finetune", runs["mlm"], "--task", "ner", "--train", data,
                                  "--validation", data, "--out", teacher, "--epochs", "2",
                                  "--batch-size", "16", "--lr", "2e-3")]) == 0
    unlabelled = tmp_path / "more.txt"
    unlabelled.write_text("Anna sees the cat\nthe dog and Tom\n")
    out = tmp_path / "student"
    code, stdout, err = run_cli(capsys, "distill", teacher, "--layers", "1", "--train", data,
                                "--unlabelled", unlabelled, "--validation", data, "--out", out,
                                "--epochs", "1", "--batch-size", "16")
    assert code == 0, err
    assert "82 rows" in stdout
    code, stdout, _ = run_cli(capsys, "predict", out, "--json", "Anna sees the cat")
    assert code == 0 and "entities" in json.loads(stdout)


def test_teacher_scores_of_a_row_and_of_tokens():
    from lmlab.distill.task import teacher_scores

    class Labels:
        head, labels = "classify", ["a", "b"]

    class Number:
        head, labels = "classify", None

    class Tags:
        head, labels = "tag", ["O", "B-X"]

    assert torch.allclose(teacher_scores(Labels, [0.25, 0.75]),
                          torch.tensor([[0.25, 0.75]]).log())
    assert teacher_scores(Number, 3.5).tolist() == [[3.5]]
    tokens = teacher_scores(Tags, (torch.tensor([1, 2]), torch.tensor([[0.5, 0.5], [1.0, 0.0]])))
    assert tokens.shape == (2, 2) and float(tokens[1, 1]) < -20
