"""lmlab plan --objectives: the steps a comparison's runs get so that training and the fixed
costs (validation, held-out scoring, probes) fill the budget, checked against the same sum
done by hand with the timings held fixed; the command it hands over is one compare's parser
reads; refusals in one line."""

import math
from pathlib import Path

import numpy as np
import pytest

from lmlab.cli import build_parser, main
from lmlab.planning import comparison
from lmlab.planning.comparison import plan_comparison
from lmlab.tasks.named import NamedTask
from tests.test_plan import data  # noqa: F401  (the module-scoped prepared dataset)

STEPS = {"clm": 0.5, "mlm": 1.5}  # seconds a training step, by objective
FORWARD = 1e-4  # seconds a forward token


@pytest.fixture()
def fixed_timings(monkeypatch):
    """A step of STEPS[objective] seconds and a forward of FORWARD seconds a token, whatever
    the load."""
    real_plan = comparison.plan

    def timed_plan(objective, **kwargs):
        found = real_plan(objective, steps_to_time=1, **kwargs)
        candidate = found.candidates[0]
        return type(found)(**{**vars(found), "candidates": [type(candidate)(
            **{**vars(candidate), "seconds_per_step": STEPS[objective]})]})

    monkeypatch.setattr(comparison, "plan", timed_plan)
    monkeypatch.setattr(comparison, "forward_seconds_per_token", lambda cfg: FORWARD)


def probe_files(tmp_path) -> NamedTask:
    rows = "".join(f"{i % 2}\tsentence number {i} of the probe\n" for i in range(200))
    for name in ("train", "validation", "test"):
        (tmp_path / f"{name}.tsv").write_text("label\tsentence\n" + rows)
    return NamedTask("p", "classify", *(str(tmp_path / f"{name}.tsv")
                                        for name in ("train", "validation", "test")))


SETTINGS = dict(seq_len=32, batch_size=4, precision="fp32", seeds=2, fractions=[0.5, 1.0],
                probe_seeds=3, probe_epochs=2.0, eval_tokens=500, eval_batches=2)


def test_steps_fill_the_budget_left_by_the_fixed_costs(data, tmp_path, fixed_timings):  # noqa: F811
    probe = probe_files(tmp_path)
    found = plan_comparison(20, ["clm", "mlm"], model="modern-tiny", data=data, probes=[probe],
                            **SETTINGS)
    runs = 2 * 2 * 2  # objectives × seeds × fractions
    assert found.runs == runs and not found.control
    fixed_seconds = sum(found.fixed_minutes.values()) * 60 / runs  # one run's
    # the probe by hand: train tokens twice, validation tokens twice, test once, three seeds
    bytes_per_token = comparison.open_or_prepare(data).bytes_per_token
    tokens = Path(probe.train).stat().st_size / bytes_per_token
    per_token = min(STEPS.values()) / (32 * 4)  # a classifier's step: the cheapest
    assert found.fixed_minutes["probes"] * 60 / runs == pytest.approx(
        3 * (2 * tokens * per_token + 3 * tokens * FORWARD))
    assert found.fixed_minutes["validation"] * 60 / runs == pytest.approx(2 * 32 * 4 * FORWARD)
    # each run scored under its own objective's rules: clm reads each token once, mlm a
    # window (here the whole one-line document) per token, masking each in turn
    spans = comparison.open_or_prepare(data).validation.document_spans()
    window = min(float(np.mean(spans[:, 1] - spans[:, 0])), 32)
    assert found.fixed_minutes["held-out scoring"] * 60 == pytest.approx(
        2 * 2 * (500 * FORWARD + 500 * FORWARD * window))
    # each objective's runs at its own step: a run per fraction and seed, each its share
    seconds_a_step_each = 2 * 1.5 * (STEPS["clm"] + STEPS["mlm"])
    assert found.steps == math.floor((1200 - runs * fixed_seconds) / seconds_a_step_each)
    assert found.steps > 0
    assert found.training_minutes + sum(found.fixed_minutes.values()) <= 20
    args = build_parser().parse_args(found.command.split()[1:])
    assert args.budget == str(found.steps) and args.match == "steps"


def test_a_budget_below_the_fixed_costs_says_what_would_hold_a_step(data, tmp_path,  # noqa: F811
                                                                   fixed_timings):
    found = plan_comparison(0.05, ["clm"], model="modern-tiny", data=data,
                            probes=[probe_files(tmp_path)], **SETTINGS)
    assert found.steps == 0 and found.needed_minutes > 0.05
    assert "holds no training step" in found.describe()
    # the command's budget is one compare takes: its smallest fraction (a half) gets a step
    args = build_parser().parse_args(found.command.split()[1:])
    assert round(int(args.budget) * 0.5) >= 1


def test_the_control_needs_init_and_an_objective_beside_it(data, capsys):  # noqa: F811
    code = main(["plan", "--minutes", "5", "--data", data, "--objectives", "none,mlm"])
    assert code == 1 and "give --init RUN" in capsys.readouterr().err  # compare's own check
    with pytest.raises(ValueError, match="at least one objective besides none"):
        plan_comparison(5, ["none"], init="runs/any", data=data, probes=[], **SETTINGS)
    code = main(["plan", "--tokens", "1M", "--data", data, "--objectives", "clm"])
    assert code == 1 and "for --minutes only" in capsys.readouterr().err
    code = main(["plan", "--minutes", "5", "--data", data, "--objectives", "clm,mlm", "--init",
                 "runs/any", "--model", "gpt2-tiny"])
    assert code == 1 and "leave out --model" in capsys.readouterr().err
