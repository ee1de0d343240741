"""lmlab plan: the Chinchilla fit against hand-computed values, the sizing table for each kind
of budget on tiny models timed for one step, the data-repetition warning, the recommendation
as a pretrain command lmlab's own parser reads, and one-line errors for bad input."""

import json
import math

import numpy as np
import pytest
import torch

import lmlab
from lmlab.cli import build_parser, main
from lmlab.config.options import config_from_args
from lmlab.config.presets import preset
from lmlab.config.training import TrainConfig
from lmlab.data.dataset import open_dataset
from lmlab.model.flops import flops_per_token, objective_flops_per_token
from lmlab.objectives.registry import build_objective
from lmlab.planning import timing as plan_timing
from lmlab.planning.scaling import CHINCHILLA
from lmlab.planning.sizing import plan
from lmlab.planning.table import format_plan

FAST = dict(seq_len=32, batch_size=4, steps_to_time=1)
WORDS = "the a quick slow brown fox dog cat jumps runs over under lazy old river bank".split()


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> str:
    """A prepared dataset of 300 one-line documents (a few thousand training tokens)."""
    rng = np.random.default_rng(0)
    lines = [" ".join(rng.choice(WORDS, size=12)) + "." for _ in range(300)]
    root = tmp_path_factory.mktemp("plan")
    source = root / "corpus.jsonl"
    source.write_text("".join(json.dumps({"text": line}) + "\n" for line in lines))
    return str(lmlab.prepare([str(source)], root / "data", vocab_size=400, sentinels=8,
                             validation_fraction=0.2))


def training_tokens(data: str) -> int:
    return open_dataset(data).train.num_tokens


class FakeClock:
    """perf_counter for plan_timing that moves only when a fake step says it took time, so a
    busy machine cannot change what a timing decides."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


def fake_steps(seconds_per_parameter_row: float, calls: list, clock: FakeClock | None = None,
               slowdowns: tuple[float, ...] = (1.0,)):
    """step_seconds that reports a step time in proportion to the model's parameters and the
    rows, its i-th run of each call slowed by slowdowns[i] (the last one repeating), as a busy
    machine slows some; moves `clock` on by each time it reports, and notes what it was asked
    to time: (parameters, rows, runs)."""

    def step_seconds(model, objective, special, rows, *args, runs, **kwargs):
        calls.append((model.num_parameters(), rows, runs))
        for run in range(runs):
            slowdown = slowdowns[min(run, len(slowdowns) - 1)]
            seconds = model.num_parameters() * rows * seconds_per_parameter_row * slowdown
            if clock is not None:
                clock.now += seconds
            yield seconds

    return step_seconds


def test_the_fit_by_hand():
    # L(1e8, 2e9) = 1.8172 + 482.01 / 1e8^0.3478 + 2085.43 / 2e9^0.3658
    #             = 1.8172 + 482.01 / 605.899 + 2085.43 / 2525.32 = 1.8172 + 0.79553 + 0.82581
    assert CHINCHILLA.loss(1e8, 2e9) == pytest.approx(3.43854, abs=1e-5)
    # G = (αA / βB)^(1/(α+β)) = (167.643 / 762.850)^(1/0.7136) = 0.219759^1.40135 = 0.119630
    # N_opt(1e18) = G · (1e18 / 6)^(0.3658 / 0.7136) = 0.119630 · (1.6667e17)^0.512612 = 8.053e7
    n_opt = CHINCHILLA.optimal_parameters(1e18)
    assert n_opt == pytest.approx(8.0532e7, rel=1e-4)
    d_opt = 1e18 / (6 * n_opt)  # 2.0696e9 tokens, about 26 per parameter
    assert d_opt == pytest.approx(2.0696e9, rel=1e-4)
    # the closed form is the minimum along C = 6·N·D, and inverts from the tokens
    for n in (0.9 * n_opt, 1.1 * n_opt):
        assert CHINCHILLA.loss(n, 1e18 / (6 * n)) > CHINCHILLA.loss(n_opt, d_opt)
    assert CHINCHILLA.flops_optimal_for(d_opt) == pytest.approx(1e18, rel=1e-9)


def test_a_token_budget_table_and_its_pretrain_command(data, monkeypatch):
    # steady step times, so that no size goes untimed on a busy machine
    monkeypatch.setattr(plan_timing, "step_seconds", fake_steps(1e-8, []))
    budget = training_tokens(data) * 3  # under four passes: no warning
    result = plan("mlm", tokens=budget, data=data, sizes="tiny,mini", **FAST)
    special = open_dataset(data).special
    objective = build_objective("mlm", special)
    # auto → the modernbert family for an objective that only reads bidirectionally
    assert [c.model for c in result.candidates] == ["modernbert-tiny", "modernbert-mini"]
    for c in result.candidates:
        assert c.flops_per_token == objective_flops_per_token(
            preset(c.model, special.vocab_size, 32), 32, objective, 4)
        assert 0 < c.non_embedding_parameters < c.parameters
        assert c.tokens == budget and c.fits
        assert c.seconds_per_step == pytest.approx(c.parameters * 4 * 1e-8)  # 4 rows
        assert c.tokens_per_second == pytest.approx(4 * 32 / c.seconds_per_step)
        assert c.minutes == pytest.approx(budget / c.tokens_per_second / 60)
        assert c.tokens_per_parameter == budget / c.non_embedding_parameters
        assert c.passes == pytest.approx(3)
    # the fit's losses only as differences from the lowest: they compare candidates
    losses = [CHINCHILLA.loss(c.parameters, budget) for c in result.candidates]
    assert [c.fit_loss_above_best for c in result.candidates] == \
        [loss - min(losses) for loss in losses]
    assert min(c.fit_loss_above_best for c in result.candidates) == 0
    # the budget's compute is where its tokens are compute-optimal
    assert result.optimum.tokens == pytest.approx(budget)
    closest = min(result.candidates,
                  key=lambda c: abs(math.log(c.parameters / result.optimum.parameters)))
    assert result.recommended == closest.model and result.warnings == []
    words = result.command.split()
    assert words[:2] == ["lmlab", "pretrain"]
    config = config_from_args(build_parser().parse_args(words[1:]), TrainConfig)
    assert (config.objective, config.model, config.tokens, config.seq_len, config.batch_size,
            config.data, config.minutes) == ("mlm", closest.model, str(budget), 32, 4, data, None)
    assert config.out == f"runs/mlm-{closest.model}"  # not the runs/mlm a plain run writes
    table = format_plan(result)
    assert "modernbert-mini" in table and f"{closest.model} *" in table and result.command in table
    assert "warning" not in table and "fit: loss above best" in table
    assert "compares candidates only, and is no loss a run will show" in table


def test_more_than_four_passes_warns_in_the_table_and_the_json(data, tmp_path, capsys):
    special = open_dataset(data).special
    share = build_objective("clm", special).predicted_fraction(4, 32)
    per_token = flops_per_token(preset("modern-tiny", special.vocab_size, 32), 32, share)
    flops = 5 * training_tokens(data) * per_token  # five passes for modern-tiny
    out = tmp_path / "plan.json"
    assert main(["plan", "--objective", "clm", "--flops", f"{flops!r}", "--data", data,
                 "--sizes", "tiny", "--seq-len", "32", "--batch-size", "4",
                 "--steps-to-time", "1", "--out", str(out)]) == 0
    saved = json.loads(out.read_text())
    (row,) = saved["candidates"]
    assert row["model"] == "modern-tiny" and row["tokens"] == int(flops / per_token)
    assert row["passes"] == pytest.approx(5, rel=1e-3)
    assert saved["budget"] == {"kind": "flops", "amount": flops}
    assert saved["fit"]["E"] == 1.8172
    (warning,) = saved["warnings"]
    assert "5.0 passes" in warning and "Muennighoff et al. 2023" in warning
    shown = capsys.readouterr().out
    assert "5!" in shown and f"warning: {warning}" in shown and saved["command"] in shown


def test_a_size_out_of_memory_is_reported_and_not_recommended(data, monkeypatch):
    steady = fake_steps(1e-8, [])

    def step_seconds(model, *args, **kwargs):
        if model.num_parameters() > 10**6:
            raise torch.OutOfMemoryError("CUDA out of memory")
        yield from steady(model, *args, **kwargs)

    monkeypatch.setattr(plan_timing, "step_seconds", step_seconds)
    result = plan("clm", minutes=0.1, data=data, sizes=["tiny", "mini"], **FAST)
    tiny, mini = result.candidates
    assert tiny.fits and tiny.tokens % (4 * 32) == 0 and tiny.tokens > 0
    assert (mini.seconds_per_step, mini.tokens, mini.fits, mini.fit_loss_above_best) == \
        (None, 0, False, None)
    assert result.optimum.flops == tiny.tokens * tiny.flops_per_token
    assert result.recommended == "modern-tiny"
    # a fast machine may also warn that tiny repeats the few thousand tokens; only mini is OOM
    assert [w for w in result.warnings if "out of memory" in w] == \
        ["modern-mini: out of memory at --batch-size 4 and --seq-len 32"]
    assert "out of memory" in format_plan(result)


def test_a_time_budget_hands_over_as_minutes_to_a_run_of_its_own(data, monkeypatch):
    """The run times itself where it runs: the plan's minutes, not the tokens they bought on
    the machine that planned."""
    monkeypatch.setattr(plan_timing, "step_seconds", fake_steps(1e-8, []))
    result = plan("mix:clm=1,mlm=1", minutes=2.5, data=data, sizes="tiny", **FAST)
    words = result.command.split()
    config = config_from_args(build_parser().parse_args(words[1:]), TrainConfig)
    assert (config.objective, config.model, config.minutes, config.tokens, config.seq_len,
            config.batch_size, config.data) == ("mix:clm=1,mlm=1", "modern-tiny", 2.5, None,
                                                32, 4, data)
    assert config.out == "runs/mix-clm-1-mlm-1-modern-tiny"


def test_sizes_that_timing_would_take_past_a_share_of_the_budget_are_not_timed(data,
                                                                               monkeypatch):
    calls, clock = [], FakeClock()
    monkeypatch.setattr(plan_timing, "time", clock)
    monkeypatch.setattr(plan_timing, "step_seconds", fake_steps(2.5e-7, calls, clock))
    result = plan("clm", minutes=1, data=data, sizes="tiny,mini,small,medium,base", **FAST)
    # a minute's 5% is under the least a plan may spend: 5 s for timing
    assert result.timing_allowance_seconds == 5.0
    tiny, mini, *larger = result.candidates
    assert tiny.seconds_per_step == pytest.approx(tiny.parameters * 4 * 2.5e-7) and tiny.fits
    # tiny probed with one row, then timed; mini probed only: its warm-up and a step would
    # pass the 5 s; the larger ones not even probed, as mini's row time says theirs would
    assert calls == [(tiny.parameters, 1, 3), (tiny.parameters, 4, 2), (mini.parameters, 1, 3)]
    estimate = mini.parameters * 4 * 2.5e-7
    assert mini.estimated_seconds_per_step == pytest.approx(estimate)
    assert mini.not_timed.startswith(f"not timed: its warm-up and one step would take about "
                                     f"{2 * estimate:.3g} s (one row timed), past what is left "
                                     f"of the plan's 5 s for timing")
    for c in larger:
        assert (c.seconds_per_step, c.estimated_seconds_per_step, c.fits) == (None, None, False)
        assert c.not_timed.startswith("not timed: a step of one row would take about ")
        assert c.not_timed.endswith("past what is left of the plan's 5 s for timing")
    for c in (mini, *larger):
        assert f"warning: {c.model}: {c.not_timed}" in format_plan(result)
    # every measurement taken was expected to end within the allowance, and did
    assert result.timing_seconds == pytest.approx(clock.now) and clock.now <= 5.0
    assert result.recommended == "modern-tiny" and result.fits
    assert "timing took" in format_plan(result) and "of the 5 s allowed" in format_plan(result)


def test_a_size_whose_step_outlasts_a_time_budget_is_not_timed(data, monkeypatch):
    calls = []
    monkeypatch.setattr(plan_timing, "step_seconds", fake_steps(1e-8, calls))
    result = plan("clm", minutes=0.0005, data=data, sizes="tiny,mini", **FAST)  # 30 ms
    tiny, mini = result.candidates
    assert tiny.fits and mini.seconds_per_step is None
    assert calls[-1] == (mini.parameters, 1, 3)  # probed, never timed
    assert mini.not_timed.startswith("not timed: a step would take about")
    assert mini.not_timed.endswith("(one row timed), longer than the whole budget")


def test_a_timing_under_way_stops_before_a_step_would_pass_the_allowance(data, monkeypatch):
    calls, clock = [], FakeClock()
    monkeypatch.setattr(plan_timing, "time", clock)
    monkeypatch.setattr(plan_timing, "MIN_TIMING_SECONDS", 0.2)
    tiny_parameters = 127_936  # modern-tiny with clm's head at this vocabulary and context
    row = 0.01  # seconds, so a step of four rows takes 0.04 s
    monkeypatch.setattr(plan_timing, "step_seconds",
                        fake_steps(row / tiny_parameters, calls, clock))
    result = plan("clm", minutes=0.01, data=data, sizes="tiny", seq_len=32, batch_size=4,
                  steps_to_time=5)
    (tiny,) = result.candidates
    assert tiny.parameters == tiny_parameters
    # a probe of three rows (0.03 s), then a warm-up and five steps asked for; at 0.19 s a
    # fourth step would end past the 0.2 s allowed, so the warm-up and three steps were taken
    assert [runs for _, _, runs in calls] == [3, 6]
    assert result.timing_allowance_seconds == 0.2
    assert result.timing_seconds == pytest.approx(0.03 + 4 * 0.04)
    assert tiny.seconds_per_step == pytest.approx(0.04)


def test_the_fastest_of_repeated_measurements_is_kept(data, monkeypatch):
    """A busy machine slows some steps: the probe keeps its fastest row, the timing its
    fastest step after the warm-up, not the first or the mean."""
    calls = []
    monkeypatch.setattr(plan_timing, "step_seconds",
                        fake_steps(1e-8, calls, slowdowns=(5.0, 3.0, 1.0, 2.0)))
    result = plan("clm", minutes=1, data=data, sizes="tiny", seq_len=32, batch_size=4,
                  steps_to_time=3)
    (tiny,) = result.candidates
    assert calls == [(tiny.parameters, 1, 3), (tiny.parameters, 4, 4)]
    assert tiny.estimated_seconds_per_step == pytest.approx(tiny.parameters * 1e-8 * 4)
    assert tiny.seconds_per_step == pytest.approx(tiny.parameters * 1e-8 * 4)


def test_once_the_allowance_is_spent_larger_sizes_are_not_timed_and_said_so(data,
                                                                            monkeypatch):
    calls, clock = [], FakeClock()
    monkeypatch.setattr(plan_timing, "time", clock)
    # a machine so busy that tiny's first one-row step takes 6 s of the 5 s allowed
    monkeypatch.setattr(plan_timing, "step_seconds",
                        fake_steps(1e-8, calls, clock, slowdowns=(6 / (127_936 * 1e-8), 1.0)))
    result = plan("clm", minutes=1, data=data, sizes="tiny,mini,small", **FAST)
    tiny, mini, small = result.candidates
    assert calls == [(tiny.parameters, 1, 3)]  # no second run, no other size
    assert clock.now == pytest.approx(6)
    assert tiny.estimated_seconds_per_step == pytest.approx(24)  # the only row, times four
    assert tiny.not_timed.startswith("not timed: its warm-up and one step would take about")
    for c in (mini, small):
        assert c.not_timed == "not timed: the plan's 5 s for timing were spent on smaller sizes"
        assert f"warning: {c.model}: {c.not_timed}" in format_plan(result)


@pytest.mark.parametrize("budget,needed", [
    # a step estimated at 100 s: two whole minutes
    (["--minutes", "0.5"], ["--minutes", "2"]),
    # three tokens buy less than a step of 4 rows of 32: one step's tokens, 100 s
    (["--tokens", "3"], ["--tokens", "128"]),
])
def test_a_budget_no_candidate_fits_hands_over_the_smallest_with_the_time_it_needs(
        data, monkeypatch, capsys, budget, needed):
    monkeypatch.setattr(plan_timing, "step_seconds",
                        fake_steps(25 / 127_936, [], slowdowns=(1.0,)))  # tiny: 25 s a row
    assert main(["plan", "--objective", "clm", *budget, "--data", data, "--sizes", "tiny,mini",
                 "--seq-len", "32", "--batch-size", "4", "--steps-to-time", "1"]) == 0
    shown = capsys.readouterr().out.splitlines()
    command = shown[-1]
    words = command.split()
    assert words[:2] == ["lmlab", "pretrain"]
    config = config_from_args(build_parser().parse_args(words[1:]), TrainConfig)
    assert (config.objective, config.model, config.data) == ("clm", "modern-tiny", data)
    assert command.split(needed[0])[1].split()[0] == needed[1]
    assert shown[-3] == ("no candidate fits the budget as timed; the command trains the "
                         "smallest, modern-tiny, for about 2 minutes here (about 100 s a step, "
                         "estimated from one row)" if budget[0] == "--minutes" else
                         "no candidate fits the budget as timed; the command trains the "
                         "smallest, modern-tiny, for about 1.67 minutes here (about 100 s a "
                         "step, estimated from one row)")


def test_the_help_states_the_timing_allowance(capsys):
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert (f"at most {plan_timing.TIMING_SHARE:.0%} of the budget's time on it (at least "
            f"{plan_timing.MIN_TIMING_SECONDS:g} s;") in shown


@pytest.mark.parametrize("arguments,message", [
    (dict(tokens="1M", minutes=1), "give exactly one budget (--minutes, --flops or --tokens), "
                                   "got --minutes and --tokens"),
    (dict(), "give exactly one budget"),
    (dict(tokens="chinchilla"), "a plan needs --tokens as a count such as 20M"),
    (dict(flops="lots"), "--flops 'lots' is not a number"),
    (dict(minutes=-1), "--minutes must be positive"),
    (dict(tokens="1M", sizes="tiny,huge"), "unknown size 'huge'; choose from tiny, mini"),
    (dict(tokens="1M", family="t5"), "unknown family 't5'; choose from auto, bert"),
    (dict(tokens="1M", objective="bert"), "unknown objective 'bert'"),
    (dict(tokens="1M", steps_to_time=0), "steps_to_time must be at least 1"),
    (dict(tokens="1M", seq_len=0), "seq_len must be at least 2"),
])
def test_bad_input_is_one_line(data, arguments, message):
    with pytest.raises(ValueError) as error:
        plan(**{"data": data, **arguments})
    assert message in str(error.value) and "\n" not in str(error.value)


def test_a_directory_that_is_not_a_prepared_dataset(tmp_path, capsys):
    assert main(["plan", "--tokens", "1M", "--data", str(tmp_path)]) == 1
    error = capsys.readouterr().err
    assert error == f"lmlab: error: {tmp_path} is not a complete prepared dataset (no " \
                    "meta.json)\n"
