"""lmlab compare on a synthetic language whose answer is known: a tagging probe where each
word's tag depends on the NEXT word, which bidirectional attention sees and causal attention
cannot, so the lab must name the masked objective better there; two objectives that are the
same (`mlm` and a one-part mixture of it) must come out with no detectable difference. Also
the design (equal FLOPs, steps, the ledger), resumption, the report and one-line errors."""

import itertools
import json
import types

import numpy as np
import pytest

import lmlab
from lmlab.cli import main
from lmlab.compare.analysis import analyse
from lmlab.compare.arms import SubRun, sub_runs
from lmlab.compare.design import CompareConfig, label
from lmlab.compare.measures import BITS_PER_BYTE, MINIMAL_PAIRS, NEXT_TOKEN, pseudo_measure
from lmlab.compare.subrun import complete
from lmlab.config.presets import preset
from lmlab.data.dataset import open_dataset
from lmlab.model.flops import objective_flops_per_token
from lmlab.objectives.registry import build_objective, split_specs
from lmlab.tasks.named import NamedTask

WORDS = ("cat dog sun moon tree rock bird fish lake hill road farm milk corn wolf bear "
         "ship coat king rain snow leaf star wind").split()  # one token each
SIGNAL = set(WORDS[:8])  # a word is tagged B-CUE when the word after it is one of these


def sentences(rng, count: int, length: int = 8) -> list[list[str]]:
    return [list(rng.choice(WORDS, size=length)) for _ in range(count)]


def tags(words: list[str]) -> list[str]:
    return ["B-CUE" if i + 1 < len(words) and words[i + 1] in SIGNAL else "O"
            for i in range(len(words))]


def write_conll(path, rows) -> str:
    path.write_text("\n".join("\n".join(f"{w}\t{t}" for w, t in zip(words, tags(words),
                                                                     strict=True)) + "\n"
                              for words in rows))
    return str(path)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    rng = np.random.default_rng(0)
    root = tmp_path_factory.mktemp("compare")
    corpus = root / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"text": " ".join(s) + "."}) + "\n"
                              for s in sentences(rng, 600)))
    data = lmlab.prepare([str(corpus)], root / "data", vocab_size=400, sentinels=4,
                         validation_fraction=0.1)
    pairs = root / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"sentence_good": f"{a} {b}.", "sentence_bad":
                                         f"{b} {a} {a}.", "UID": f"phenomenon-{i % 2}"}) + "\n"
                             for i, (a, b) in enumerate(itertools.pairwise(WORDS))))
    probe = (f"cue=ner:{write_conll(root / 'train.conll', sentences(rng, 800))}:"
             f"{write_conll(root / 'test.conll', sentences(rng, 120))}")
    return {"data": str(data), "pairs": str(pairs), "probe": probe, "root": root}


def design(world, objectives, out, **options) -> CompareConfig:
    fields = dict(data=world["data"], budget="40", match="steps", fractions="1", seeds=2,
                  model="gpt2-tiny", seq_len=32, batch_size=16, lr=3e-3, eval_tokens=2000,
                  probe_epochs=4, out=str(out))
    return CompareConfig.of(objectives, **{**fields, **options})


def test_objective_lists_keep_a_mixture_whole():
    assert split_specs("mlm,clm,mix:clm=1,mlm=15") == ["mlm", "clm", "mix:clm=1,mlm=15"]
    assert split_specs("alternate:clm,mlm@100,span") == ["alternate:clm,mlm@100", "span"]
    assert label("mix:clm=1,mlm=15") == "mix-clm-1-mlm-15"


def test_equal_flops_gives_each_objective_the_steps_its_cost_buys(world, tmp_path):
    dataset = open_dataset(world["data"])
    model = preset("gpt2-tiny", dataset.special.vocab_size, 32)
    per_step = {}
    for spec in ("mlm", "clm"):
        objective = build_objective(spec, dataset.special)
        per_step[spec] = objective_flops_per_token(model, 32, objective, 16) * 16 * 32
    budget = 200 * per_step["clm"]
    cfg = design(world, "mlm,clm", tmp_path, budget=f"{budget!r}", match="flops",
                 fractions="1/4,1")
    subs = sub_runs(cfg, dataset)
    assert len(subs) == 2 * 2 * 2
    steps = {(s.objective, s.fraction): s.steps for s in subs}
    assert steps["clm", 1.0] == 200 and steps["clm", 0.25] == 50
    # a masked step projects onto the vocabulary, and runs its last block past attention, at
    # ~15% of positions, so costs less
    assert steps["mlm", 1.0] == round(budget / per_step["mlm"]) > 200
    assert all(s.seed in (0, 1) for s in subs)


def test_objective_options_shape_every_sub_run_and_its_flops(world, tmp_path, monkeypatch):
    """A wider generator costs rtd more a step, so the same FLOPs buy it fewer; and every
    sub-run pre-trains with the options given."""
    dataset = open_dataset(world["data"])
    budget = f"{1e12!r}"
    steps = {}
    for size in ("width/4", "width/2"):
        cfg = design(world, "mlm,rtd", tmp_path, budget=budget, match="flops",
                     objective_options={"rtd_generator": size, "mlm_rate": 0.2,
                                        "whole_word": True})
        steps[size] = {s.objective: s.steps for s in sub_runs(cfg, dataset)}
    assert steps["width/2"]["rtd"] < steps["width/4"]["rtd"]
    assert steps["width/2"]["mlm"] == steps["width/4"]["mlm"]
    # the ledger's supervised predictions: the discriminator's targets are at every position,
    # the masked LM's at the ~20% it masks
    supervised = {s.objective: s.predictions_per_step / s.tokens_per_step
                  for s in sub_runs(cfg, dataset)}
    assert supervised["rtd"] == 1.0 and 0.1 < supervised["mlm"] < 0.3
    seen = []

    class Stop(Exception):
        pass

    def pretrain_with_settings(_config, fields):
        seen.append(fields)
        raise Stop

    monkeypatch.setattr("lmlab.compare.subrun.pretrain_with_settings", pretrain_with_settings)
    for sub in sub_runs(cfg, dataset)[::2]:
        with pytest.raises(Stop):
            complete(sub, cfg, world["data"])
    assert [(f["objective"], f["rtd_generator"], f["mlm_rate"]) for f in seen] == \
        [("mlm", "width/2", 0.2), ("rtd", "width/2", 0.2)]


def test_a_sequence_is_owed_the_steps_its_phases_cost_together(world, tmp_path):
    dataset = open_dataset(world["data"])
    model = preset("gpt2-tiny", dataset.special.vocab_size, 32)
    clm = objective_flops_per_token(model, 32, build_objective("clm", dataset.special), 16)
    budget = 200 * clm * 16 * 32
    cfg = design(world, "clm,then:clm,mlm@0.75", tmp_path, budget=f"{budget!r}",
                 match="flops", fractions="1")
    steps = {s.objective: s.steps for s in sub_runs(cfg, dataset)}
    sequence = build_objective("then:clm,mlm@0.75", dataset.special)
    # 3/4 of the steps at clm's cost, 1/4 at masked LM's with both heads asked for
    per_token = objective_flops_per_token(model, 32, sequence, 16)
    assert per_token < clm and steps["then:clm,mlm@0.75"] == round(budget / (per_token * 512))
    assert steps["clm"] == 200 < steps["then:clm,mlm@0.75"]


def test_a_sub_run_whose_objective_warned_is_named_with_its_warning(world, tmp_path):
    """Read from each sub-run's last validation by its objective: an RTD seed whose
    discriminator sat at the entropy of its replaced share is named; the other seed, and
    masked LM (which has no such failure to look for), are not."""
    from lmlab.compare.lab import run_warnings
    from lmlab.objectives.rtd import base_rate_entropy

    cfg = design(world, "mlm,rtd", tmp_path / "lab", model="bert-tiny")
    dataset = open_dataset(world["data"])
    subs = sub_runs(cfg, dataset)
    learned = {0: 1.0, 1: 0.9}  # of the base rate's entropy, per seed
    for sub in subs:
        sub.out.mkdir(parents=True)
        last = {"kind": "eval", "step": sub.steps, "mlm/mlm_loss": 5.0,
                "rtd/discriminator_loss": 50 * learned[sub.seed] * base_rate_entropy(0.14),
                "rtd/replaced_fraction": 0.14}
        (sub.out / "metrics.jsonl").write_text(json.dumps(last) + "\n")
    (line,) = run_warnings(cfg, subs, dataset)
    assert line.startswith("rtd budget 1 seed 0: the discriminator has learned nothing")


@pytest.mark.slow
def test_the_lab_finds_the_known_answer_and_resumes(world, tmp_path, capsys):
    out = tmp_path / "lab"
    # lr 2e-3: at 1e-3 these 40-step runs of modern-tiny (its head tied) learned too little
    # for two seeds to name a side past the Holm adjustment (adjusted p 0.06)
    result = lmlab.compare_objectives("mlm,clm,mix:mlm=1", budget=40, data=world["data"],
                                      match="steps", fractions="1", seeds=2,
                                      model="modern-tiny", seq_len=32, batch_size=16, lr=2e-3,
                                      eval_tokens=2000, probe_epochs=4, probe_lr=1e-3,
                                      probes=[world["probe"]], pairs=[world["pairs"]],
                                      out=str(out), progress=False)
    said = {(v["measure"], v["a"], v["b"]): v for v in result.verdicts}
    probe = "probe cue (f1)"
    # the next word decides the tag: bidirectional reading wins, causal cannot see it
    assert said[probe, "mlm", "clm"]["says"] == "mlm better"
    assert said[probe, "mlm", "clm"]["low"] > 0.2
    # the same objective twice: never a winner
    for measure in (probe, MINIMAL_PAIRS, pseudo_measure("pseudo")):
        assert said[measure, "mlm", "mix:mlm=1"]["says"] == "no detectable difference"
    # bits per byte exists only where a true likelihood does; pseudo ones stay apart
    assert (BITS_PER_BYTE, "mlm", "clm") not in said
    scored = {(row.measure, row.objective) for row in result.analysis.rows}
    assert {(BITS_PER_BYTE, "clm"), (NEXT_TOKEN, "clm")} <= scored
    assert (NEXT_TOKEN, "mlm") not in scored
    assert (pseudo_measure("pseudo"), "mlm", "clm") not in said
    record = json.loads((out / "comparison.json").read_text())
    assert len(record["ledger"]) == 3 * 2 and {e["steps"] for e in record["ledger"]} == {40}
    assert record["run_warnings"] == []
    assert record["data"]["sha256"] and record["code"]["sha256"]
    page = (out / "report.html").read_text()
    assert "data:image/png;base64," in page and "http" not in page.replace(
        "http-equiv", "")
    for name in ("curves.png", "differences.png", "phenomena.png", "probes.png"):
        assert (out / name).stat().st_size > 1000
    assert set(record["phenomena"]["mlm"]) == {"phenomenon-0", "phenomenon-1"}
    capsys.readouterr()
    # the same command again trains nothing
    assert main(["compare", "--objectives", "mlm,clm,mix:mlm=1", "--budget", "40",
                 "--match", "steps", "--fractions", "1", "--seeds", "2", "--data",
                 world["data"], "--model", "modern-tiny", "--seq-len", "32", "--batch-size",
                 "16", "--lr", "2e-3", "--eval-tokens", "2000", "--probe-epochs", "4",
                 "--probe-lr", "1e-3", "--probe", world["probe"], "--pairs", world["pairs"],
                 "--out", str(out)]) == 0
    shown = capsys.readouterr().out
    assert "6 pre-training runs: 6 done, 0 to run" in shown
    assert "probe cue (f1): mlm vs clm: mlm better" in shown


@pytest.mark.parametrize("arguments,message", [
    (["--objectives", "mlm"], "compare needs two or more different objectives"),
    (["--objectives", "mlm,nope"], "unknown objective 'nope'"),
    (["--objectives", "mlm,clm", "--budget", "abc"], "--budget 'abc' is not a number of steps"),
    (["--objectives", "mlm,clm", "--budget", "0.1"], "--budget 0.1 is too small"),
    (["--objectives", "mlm,clm", "--fractions", "0,1"], "budget fractions must lie in (0, 1]"),
    (["--objectives", "mlm,clm", "--probe", "x=classify:missing.tsv:dev.tsv"],
     "probe x: missing.tsv is not a file"),
    (["--objectives", "mlm,clm", "--probe", "nonsense"], "write NAME=TASK:TRAIN:VALIDATION"),
    (["--objectives", "mlm,clm", "--pairs", "missing.jsonl"], "minimal pairs: missing.jsonl"),
    (["--objectives", "mlm,rtd", "--mlm-rate", "1.5"], "mlm_rate must lie in [0, 1], got 1.5"),
    (["--objectives", "mlm,clm", "--precision", "fp16"],
     "--optimizer muon does not run with --precision fp16; use --optimizer adamw"),
])
def test_bad_designs_fail_in_one_line_before_anything_is_written(world, tmp_path, capsys,
                                                                 arguments, message):
    out = tmp_path / "lab"
    base = {"--budget": "10", "--match": "steps", "--data": world["data"], "--out": str(out)}
    given = dict(zip(arguments[::2], arguments[1::2], strict=True))
    words = ["compare", *[w for k, v in {**base, **given}.items() for w in (k, v)]]
    assert main(words) == 1
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert not out.exists()


def test_another_design_in_the_same_directory_is_refused(world, tmp_path, capsys):
    out = tmp_path / "lab"
    out.mkdir()
    (out / "design.json").write_text(json.dumps({"seeds": 5}))
    assert main(["compare", "--objectives", "mlm,clm", "--budget", "10", "--match", "steps",
                 "--data", world["data"], "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "holds a comparison with other" in err and "seeds" in err


def test_objective_options_at_their_defaults_continue_a_design_begun_without_them(world,
                                                                                    tmp_path):
    """However the defaults are given (none, spelled out, an ObjectiveOptions, from Python or
    the constructor), the design is the one a design.json written without options holds."""
    from lmlab.compare.lab import _claim
    from lmlab.config.objective_options import ObjectiveOptions

    out = tmp_path / "lab"
    first = CompareConfig(("mlm", "clm"), budget="10", match="steps", out=str(out))
    _claim(out, first, "data")
    before = json.loads((out / "design.json").read_text())
    before.pop("objective_options")  # as written before options could be given
    (out / "design.json").write_text(json.dumps(before))
    for given in ({}, {"mlm_rate": 0.15}, ObjectiveOptions()):
        again = CompareConfig(("mlm", "clm"), budget="10", match="steps", out=str(out),
                              objective_options=given)
        assert again.objective_options is None
        _claim(out, again, "data")  # the same comparison: continued, not refused
    changed = CompareConfig(("mlm", "clm"), budget="10", match="steps", out=str(out),
                            objective_options=ObjectiveOptions(mlm_rate=0.3))
    assert changed.objective_options == {"mlm_rate": 0.3}
    with pytest.raises(ValueError, match="other objective_options"):
        _claim(out, changed, "data")


def test_a_probe_reads_its_parts_or_a_finetune_config(tmp_path):
    with pytest.raises(ValueError, match="unknown task 'tag'"):
        NamedTask.read("x=tag:a:b")
    table = tmp_path / "sick.tsv"
    table.write_text("sentence_A\tsentence_B\tlabel\tsplit\na\tb\tX\tTRAIN\n")
    config = tmp_path / "sick.yaml"
    config.write_text(f"task: pairs\ntrain: {table}\nvalidation: {table}\n"
                      f"label_column: label\ntrain_where: split=TRAIN\n")
    probe = NamedTask.read(f"sick={config}")
    assert (probe.task, probe.train, probe.test, probe.config) == ("pairs", str(table), None,
                                                                   str(config))
    assert probe.scored_split == "validation"
    config.write_text("task: pairs\n")
    with pytest.raises(ValueError, match="sick.yaml: fine-tuning needs --train and --validation"):
        NamedTask.read(f"sick={config}")


def test_the_verbs_are_plain_functions_beside_their_packages():
    import lmlab.compare.stats
    import lmlab.finetune.results

    assert isinstance(lmlab.compare, types.ModuleType)  # the packages, and nothing else
    assert isinstance(lmlab.finetune, types.ModuleType) and not callable(lmlab.finetune)
    assert lmlab.fine_tune.__doc__.startswith("Fine-tune the run")
    assert lmlab.compare_objectives.__module__ == "lmlab.compare"


@pytest.mark.slow
def test_side_by_side_workers_under_a_time_budget_and_an_interrupted_sub_run(world, tmp_path,
                                                                             capsys):
    out = tmp_path / "lab"
    options = dict(budget=0.04, data=world["data"], match="time", fractions="1", seeds=1,
                   model="modern-tiny", seq_len=32, batch_size=16, eval_tokens=2000,
                   workers=2, out=str(out), progress=False)
    first = lmlab.compare_objectives("mlm,clm", **options)
    assert {e["objective"] for e in first.analysis.ledger} == {"mlm", "clm"}
    assert all(e["steps"] >= 1 and e["seconds"] > 0 for e in first.analysis.ledger)
    # a sub-run killed after its checkpoint but before it was scored continues and is scored
    killed = out / "runs" / "clm" / "budget-1" / "seed-0"
    (killed / "scores.npz").unlink()
    (killed / "pretrained.json").unlink()
    capsys.readouterr()
    again = lmlab.compare_objectives("mlm,clm", **{**options, "workers": 1})
    assert "2 pre-training runs: 1 done, 1 to run (clm 1)" in capsys.readouterr().out
    assert (killed / "scores.npz").is_file()
    assert [r.mean for r in again.analysis.rows] == pytest.approx(
        [r.mean for r in first.analysis.rows])


def test_the_analysis_finds_where_one_objective_overtakes_another(tmp_path):
    # planted scores: clm ahead by 0.1 at a quarter of the budget, mlm ahead by 0.1 at all of it
    cfg = CompareConfig.of("mlm,clm", budget="4e11", fractions="1/4,1", seeds=3,
                           out=str(tmp_path))
    rng = np.random.default_rng(0)
    means = {("mlm", 0.25): 0.5, ("clm", 0.25): 0.6, ("mlm", 1.0): 0.8, ("clm", 1.0): 0.7}
    noise = rng.normal(scale=0.02, size=(3, 40))
    noise -= noise.mean(axis=1, keepdims=True)  # each seed's mean is exactly the planted one
    subs = []
    for (objective, fraction), mean in means.items():
        for seed in range(3):
            sub = SubRun(objective, seed, fraction, round(400 * fraction), None, 1e9, 512, 77.0,
                         tmp_path / objective / str(fraction) / str(seed))
            sub.out.mkdir(parents=True)
            np.savez(sub.out / "scores.npz", **{"probe x (accuracy)": (mean + noise[seed])[None]})
            (sub.out / "pretrained.json").write_text(json.dumps({"steps": sub.steps,
                                                                 "seconds": 1.0}))
            subs.append(sub)
    found = analyse(cfg, subs)
    (crossing,) = found.crossovers
    assert (crossing.a, crossing.b, crossing.before) == ("mlm", "clm", "clm")
    # halfway in log FLOPs between 1e11 and 4e11
    assert crossing.flops == pytest.approx(2e11)
    (pair,) = found.verdicts
    assert pair.verdict.says == "mlm better"
    assert pair.verdict.difference.estimate == pytest.approx(0.1)
    ledger = {(e["objective"], e["fraction"], e["seed"]): e for e in found.ledger}
    assert ledger["mlm", 1.0, 2] == {"objective": "mlm", "fraction": 1.0, "seed": 2,
                                     "steps": 400, "tokens": 400 * 512, "flops": 4e11,
                                     "predictions": 400 * 77.0, "seconds": 1.0}
    row = next(r for r in found.rows if (r.objective, r.fraction) == ("clm", 0.25))
    assert row.mean == pytest.approx(0.6) and row.seed_std == pytest.approx(0, abs=1e-12)


def test_every_sub_run_and_probe_reports_to_the_trackers(world, tmp_path, capsys):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from lmlab.runs.metrics import read_metrics

    out = tmp_path / "lab"
    words = ["compare", "--objectives", "mlm,clm", "--budget", "4", "--match", "steps",
             "--fractions", "1", "--seeds", "1", "--data", world["data"], "--model", "gpt2-tiny",
             "--seq-len", "32", "--batch-size", "16", "--eval-tokens", "2000", "--probe",
             world["probe"], "--probe-epochs", "0.2", "--out", str(out)]
    assert main([*words, "--report-to", "tensorboard"]) == 0
    shown = capsys.readouterr().out  # each sub-run and probe says its first steps and pace
    assert shown.count("training: step 1 of 4 starts") == 2
    assert shown.count("steps/s") >= 2
    pretrained = [out / "runs" / objective / "budget-1" / "seed-0" for objective in ("mlm", "clm")]
    for run in [*pretrained, *(r / "probes" / "cue" / "seed-0" for r in pretrained)]:
        events = EventAccumulator(str(run / "tensorboard"))
        events.Reload()
        losses = {r["step"]: r["loss"] for r in read_metrics(run) if r["kind"] == "train"}
        assert {e.step: e.value for e in events.Scalars("train/loss")} == pytest.approx(losses)
    capsys.readouterr()
    # trackers change no sub-run: the comparison without them trains nothing again
    assert main(words) == 0
    assert "2 pre-training runs: 2 done, 0 to run" in capsys.readouterr().out
