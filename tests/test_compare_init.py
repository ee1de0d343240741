"""`lmlab compare --init RUN`: every objective continues RUN's weights under the equal budget,
and `none`, RUN as it came (a run of no steps), is the control each is judged against: probed
and scored as the others are, its verdicts reported first, as helps, hurts or no detectable
difference."""

import json

import numpy as np
import pytest
import torch

from lmlab.cli import main
from lmlab.compare.analysis import analyse
from lmlab.compare.arms import SubRun
from lmlab.compare.design import CompareConfig
from lmlab.compare.layout import RECORD, REPORT
from lmlab.compare.measures import BITS_PER_BYTE
from lmlab.config.training import TrainConfig
from lmlab.data.dataset import open_dataset
from lmlab.finetune.results import ITEM_SCORES
from lmlab.model.flops import objective_flops_per_token
from lmlab.objectives.registry import build_objective
from lmlab.runs.checkpoints import list_checkpoints, sha256_of
from lmlab.runs.run import load_run
from lmlab.train.entry import pretrain
from tests.test_compare import world  # noqa: F401 — the synthetic language and its probe

PROBE = "probe cue (f1)"


@pytest.fixture(scope="module")
def source(world):  # noqa: F811
    """A causal run on the comparison's own data (so it shares its tokenizer)."""
    out = world["root"] / "source"
    return pretrain(TrainConfig(objective="clm", model="gpt2-tiny", data=world["data"],
                                out=str(out), seq_len=32, batch_size=16, steps=6,
                                warmup_steps=1), open_dataset(world["data"]))


def compare_words(world, source, out, objectives="none,mlm"):  # noqa: F811
    return ["compare", "--init", str(source), "--objectives", objectives, "--budget", "20",
            "--match", "steps", "--fractions", "1", "--seeds", "2", "--data", world["data"],
            "--seq-len", "32", "--batch-size", "16", "--eval-tokens", "2000",
            "--probe-epochs", "1", "--probe", world["probe"], "--out", str(out)]


@pytest.fixture(scope="module")
def compared(world, source, tmp_path_factory):  # noqa: F811
    out = tmp_path_factory.mktemp("adaptations") / "lab"
    assert main(compare_words(world, source, out)) == 0
    return out


@pytest.mark.slow
def test_the_control_is_the_source_as_it_came_probed_as_the_others(compared, source):
    control = compared / "runs" / "none"
    # one run of no steps, read at every seed: the source's weights, untouched
    assert [p.name for p in list_checkpoints(control / "checkpoints")] == ["step-00000000"]
    kept = load_run(control, "last").model.state_dict()
    given = load_run(source).model.state_dict()
    assert kept.keys() == given.keys()
    assert all(torch.equal(kept[name], given[name]) for name in given)
    assert (control / "probes" / "cue" / "seed-0" / ITEM_SCORES).is_file()
    with np.load(control / "scores.npz") as scores:
        assert {PROBE, BITS_PER_BYTE} <= set(scores.files)  # the source's own likelihood
    record = json.loads((compared / RECORD).read_text())
    spent = {(e["objective"], e["seed"]): (e["steps"], e["flops"]) for e in record["ledger"]}
    assert spent["none", 0] == spent["none", 1] == (0, 0.0)
    assert spent["mlm", 0][0] == spent["mlm", 1][0] == 20 and spent["mlm", 0][1] > 0


@pytest.mark.slow
def test_each_adaptation_continues_the_source(compared, source):
    best = load_run(source).checkpoint
    for seed in (0, 1):
        saved = json.loads((compared / "runs" / "mlm" / "budget-1" / f"seed-{seed}" /
                            "config.json").read_text())
        assert saved["init"]["weights_sha256"] == sha256_of(best / "model.safetensors")
        assert saved["model"] == json.loads((source / "config.json").read_text())["model"]


@pytest.mark.slow
def test_a_verdict_against_none_is_reported_first(compared):
    record = json.loads((compared / RECORD).read_text())
    first = record["verdicts"][0]
    assert (first["a"], first["b"]) == ("mlm", "none")
    probe = next(v for v in record["verdicts"] if v["measure"] == PROBE)
    assert probe["effect"] in ("helps", "hurts", "no detectable difference")
    assert probe["low"] <= probe["estimate"] <= probe["high"]
    page = (compared / REPORT).read_text()
    assert "Each adaptation against none, the run as it came" in page


@pytest.mark.slow
def test_the_same_command_again_trains_nothing_and_prints_the_verdicts(
        world, source, compared, capsys):  # noqa: F811
    capsys.readouterr()
    assert main(compare_words(world, source, compared)) == 0
    shown = capsys.readouterr().out
    assert "3 pre-training runs: 3 done, 0 to run" in shown  # the control is one run
    assert "each adaptation against none, the run as it came, first" in shown
    assert f"{PROBE}: mlm vs none: " in shown


@pytest.mark.parametrize("words,message", [
    (["--objectives", "none,mlm"], "the objective none is the control of a comparison of "
                                   "adaptations"),
    (["--objectives", "none,mlm", "--init", "{source}", "--model", "gpt2-tiny"],
     "--init takes the model from"),
    (["--objectives", "mlm,clm", "--init", "{missing}"], "--init"),
])
def test_bad_adaptation_designs_fail_in_one_line(
        world, source, tmp_path, capsys, words, message):  # noqa: F811
    out = tmp_path / "lab"
    words = [w.format(source=source, missing=tmp_path / "missing") for w in words]
    assert main(["compare", *words, "--budget", "20", "--match", "steps", "--data",
                 world["data"], "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert not out.exists()


def test_helps_and_hurts_read_against_the_control(tmp_path):
    """Planted probe scores: mlm above the control at both budgets, clm below it; the control
    trained nothing, so where clm crosses it lies at clm's own FLOPs."""
    cfg = CompareConfig.of("mlm,none,clm", budget="400", match="steps", fractions="1/4,1",
                           seeds=3, init="base", out=str(tmp_path))
    noise = np.random.default_rng(0).normal(scale=0.02, size=(3, 40))
    noise -= noise.mean(axis=1, keepdims=True)
    means = {("mlm", 0.25): 0.7, ("mlm", 1.0): 0.8, ("clm", 0.25): 0.7, ("clm", 1.0): 0.5,
             ("none", 0.25): 0.6, ("none", 1.0): 0.6}
    subs = []
    for (objective, fraction), mean in means.items():
        steps = 0 if objective == "none" else round(400 * fraction)
        for seed in range(3):
            sub = SubRun(objective, seed, fraction, steps, None, 1e9 if steps else 0.0, 512,
                         77.0, tmp_path / objective / str(fraction) / str(seed))
            sub.out.mkdir(parents=True)
            np.savez(sub.out / "scores.npz", **{"probe x (accuracy)": (mean + noise[seed])[None]})
            (sub.out / "pretrained.json").write_text(json.dumps({"steps": steps, "seconds": 1}))
            subs.append(sub)
    found = analyse(cfg, subs)
    said = [(v.a, v.b, v.effect) for v in found.verdicts]
    assert said[:2] == [("mlm", "none", "helps"), ("clm", "none", "hurts")]
    assert said[2][:2] == ("mlm", "clm")
    assert found.verdict_lines[0].startswith("probe x (accuracy): mlm vs none: mlm helps: "
                                             "mlm better by 0.2")
    (crossing,) = [c for c in found.crossovers if c.b == "none"]
    assert (crossing.a, crossing.before) == ("clm", "clm")
    assert 1e11 < crossing.flops < 4e11  # between clm's two budgets


def test_a_plan_with_init_times_the_sources_model(world, source):  # noqa: F811
    from lmlab.planning.sizing import plan
    from lmlab.planning.table import format_plan

    planned = plan("mlm", minutes=10, data=world["data"], init=str(source), seq_len=32,
                   batch_size=4, steps_to_time=1)
    (candidate,) = planned.candidates
    dataset = open_dataset(world["data"])
    objective = build_objective("mlm", dataset.special, word_starts=dataset.word_starts)
    assert candidate.model == str(source)
    assert candidate.flops_per_token == objective_flops_per_token(
        load_run(source).model.cfg, 32, objective, 4)
    assert candidate.seconds_per_step is not None and candidate.seconds_per_step > 0, \
        candidate.not_timed
    assert planned.command.startswith(f"lmlab pretrain --objective mlm --init {source} ")
    assert str(source) in format_plan(planned)


def test_a_plan_with_init_refuses_sizes_and_a_missing_run(
        world, source, tmp_path, capsys):  # noqa: F811
    words = ["plan", "--init", str(source), "--minutes", "1", "--data", world["data"]]
    assert main([*words, "--sizes", "tiny"]) == 1
    assert "--init takes the model from" in capsys.readouterr().err
    assert main(["plan", "--init", str(tmp_path / "missing"), "--minutes", "1", "--data",
                 world["data"]]) == 1
    err = capsys.readouterr().err.strip()
    assert "is not a readable lmlab run" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("class_name,control", [("BertModel", "mlm"),
                                                ("BertForPreTraining", "mlm+nsp")])
def test_the_control_runs_the_sources_objective_only_with_the_sources_heads(
        tmp_path, class_name, control):
    """An encoder imported without heads (as sentence-transformers models come) has no head
    its own objective (mlm+nsp) trains, nor sentence offsets in the user's text to need: its
    control runs the first adaptation's objective; one with both heads runs its own."""
    from lmlab.compare.subrun import control_objective
    from lmlab.export.importer import import_hf
    from lmlab.train.warm_start import load_source
    from tests.test_continued_pretraining import run_dataset
    from tests.test_hf_import import saved_bert

    saved_bert(tmp_path / "hf", class_name=class_name)
    imported = import_hf(tmp_path / "hf", tmp_path / "run").out
    source = load_source(str(imported))
    assert source.run.spec == "mlm+nsp"
    cfg = CompareConfig(objectives=("none", "mlm"), budget="10", match="steps",
                        init=str(imported), out=str(tmp_path / "cmp"))
    assert control_objective(cfg, source, run_dataset(imported)) == control


def test_the_controls_text_is_scored_only_through_heads_its_source_trained(world, source):  # noqa: F811
    """A control's head that its source lacks never trained: scoring the held-out text through
    it would judge every adaptation against an untrained head, so that measure is left out."""
    from lmlab.compare.measures import HeldOut, text_scores

    run = load_run(source, "last")
    held_out = HeldOut.of(run, world["data"], 500)
    assert BITS_PER_BYTE in text_scores(run, held_out, tuple(run.model.heads))
    assert text_scores(run, held_out, ()) == {}
