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
from lmlab.compare import plan_timing
from lmlab.compare.plan import plan
from lmlab.compare.plan_table import format_plan
from lmlab.compare.scaling import CHINCHILLA
from lmlab.config.options import config_from_args
from lmlab.config.presets import preset
from lmlab.config.training import TrainConfig
from lmlab.data.dataset import open_dataset
from lmlab.model.flops import flops_per_token, objective_flops_per_token
from lmlab.objectives.registry import build_objective

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
               sleep: float = 0.0):
    """step_seconds that reports a step time in proportion to the model's parameters and the
    rows (moving `clock` on by `sleep` seconds a step), and notes what it was asked to time:
    (parameters, rows, runs)."""

    def step_seconds(model, objective, special, rows, *args, runs, **kwargs):
        calls.append((model.num_parameters(), rows, runs))
        for _ in range(runs):
            if clock is not None:
                clock.now += sleep
            yield model.num_parameters() * rows * seconds_per_parameter_row

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
    calls = []
    monkeypatch.setattr(plan_timing, "step_seconds", fake_steps(2.5e-7, calls))
    result = plan("clm", minutes=1, data=data, sizes="tiny,mini,small,medium,base", **FAST)
    # a minute's 5% is under the least a plan may spend: 5 s for timing
    assert result.timing_allowance_seconds == 5.0 and result.timing_seconds > 0
    tiny, *larger = result.candidates
    assert tiny.seconds_per_step == pytest.approx(tiny.parameters * 4 * 2.5e-7) and tiny.fits
    # every size is probed with one row; only tiny is timed beyond that
    assert calls == [(tiny.parameters, 1, 1), (tiny.parameters, 4, 2),
                     *[(c.parameters, 1, 1) for c in larger]]
    for c in larger:
        assert (c.seconds_per_step, c.fits) == (None, False)
        assert f"warning: {c.model}: {c.not_timed}" in format_plan(result)
        # its row's time times the batch's four rows: longer than the minute, or a warm-up
        # and a step past what is left of the 5 s
        estimate = c.parameters * 2.5e-7 * 4
        assert c.not_timed.startswith(f"not timed: a step would take about {estimate:.3g} s "
                                      f"(one row timed), longer than the whole budget"
                                      if estimate > 60 else
                                      f"not timed: its warm-up and one step would take about "
                                      f"{2 * estimate:.3g} s (one row timed), past what is left "
                                      f"of the plan's 5 s for timing")
    assert "longer than the whole budget" in larger[-1].not_timed  # base
    assert "past what is left" in larger[0].not_timed  # mini
    assert result.recommended == "modern-tiny"
    assert "timing took" in format_plan(result) and "of the 5 s allowed" in format_plan(result)


def test_a_size_whose_step_outlasts_a_time_budget_is_not_timed(data, monkeypatch):
    calls = []
    monkeypatch.setattr(plan_timing, "step_seconds", fake_steps(1e-8, calls))
    result = plan("clm", minutes=0.0005, data=data, sizes="tiny,mini", **FAST)  # 30 ms
    tiny, mini = result.candidates
    assert tiny.fits and mini.seconds_per_step is None
    assert calls[-1] == (mini.parameters, 1, 1)  # probed, never timed
    assert mini.not_timed.startswith("not timed: a step would take about")
    assert mini.not_timed.endswith("(one row timed), longer than the whole budget")


def test_a_timing_under_way_stops_once_the_allowance_is_spent(data, monkeypatch):
    calls = []
    clock = FakeClock()
    monkeypatch.setattr(plan_timing, "time", clock)
    monkeypatch.setattr(plan_timing, "step_seconds",
                        fake_steps(1e-9, calls, clock=clock, sleep=0.15))
    monkeypatch.setattr(plan_timing, "MIN_TIMING_SECONDS", 0.2)
    result = plan("clm", minutes=0.01, data=data, sizes="tiny", seq_len=32, batch_size=4,
                  steps_to_time=5)
    # a probe, then a warm-up and five steps asked for (1.05 s in all); the 0.2 s allowance
    # stopped the timing after its warm-up and one step
    assert [runs for _, _, runs in calls] == [1, 6]
    assert result.timing_allowance_seconds == 0.2
    assert result.timing_seconds == pytest.approx(0.45)  # the probe, the warm-up and a step
    (tiny,) = result.candidates
    assert tiny.seconds_per_step == pytest.approx(tiny.parameters * 4 * 1e-9)


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
