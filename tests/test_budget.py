from types import SimpleNamespace

import pytest
import torch

from lmlab.config.budget import Budget, parse_count, step_budget, steps_in_minutes
from lmlab.config.presets import preset
from lmlab.config.training import TrainConfig
from lmlab.model import LanguageModel
from lmlab.objectives import SpecialTokens
from lmlab.objectives.registry import build_objective
from lmlab.train import entry as pretraining
from lmlab.train import step
from lmlab.train.checkpoint import LoopState
from lmlab.train.deadline import Deadline
from lmlab.train.distributed import Env
from lmlab.train.setup import Started, plan_length

ONE_PROCESS = Env(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"))


def test_counts_and_budgets():
    assert parse_count("20M") == 20_000_000 and parse_count("1.5k") == 1500
    assert parse_count("4096") == 4096
    assert step_budget(100, None, 10**6, 4096) == 100
    assert step_budget(None, "chinchilla", 10**6, 4096) == 4883  # ceil(2e7 / 4096)
    assert step_budget(100, "1M", 0, 4096) == 100  # the smaller budget wins
    assert step_budget(None, None, 10**6, 4096) is None
    assert steps_in_minutes(2, 0.5) == 240


def test_a_budget_is_checked_as_it_is_read_from_a_config_or_a_run():
    budget = TrainConfig(steps=10, tokens="1k").budget
    assert budget == Budget.of({"steps": 10, "tokens": "1k", "lr": 0.1})
    assert budget.step_cap(10**6, 100) == 10 and budget.time_limit(10) is None
    assert Budget().time_limit(None) == 5.0  # no budget at all: five minutes
    with pytest.raises(ValueError, match="minutes must be a positive number"):
        Budget.of({"minutes": 0.0})


def test_unreadable_count():
    with pytest.raises(ValueError, match="cannot read 'lots' as a token count"):
        parse_count("lots")


@pytest.mark.parametrize("objective", ["mlm", "clm", "mlm+nsp", "mix:clm=1,mlm=15", "span"])
@pytest.mark.parametrize("specials_first", [True, False])  # lmlab's layout, and a tokenizer's
def test_a_minutes_budget_times_the_step_training_runs(objective, specials_first, monkeypatch):
    """The timing step is the objective's own batch and fused loss (a sparse MLM head is
    timed as sparse) on a micro-batch, and leaves no gradient behind."""
    special = SpecialTokens.layout(300, n_sentinels=20) if specials_first else SpecialTokens(
        300, pad=299, unk=298, cls=297, sep=296, mask=295, bos=294, eos=293,
        sentinels=tuple(range(273, 293)))
    built = build_objective(objective, special)
    model = LanguageModel(preset("bert-tiny", 300, 32), heads=built.heads)
    cfg = TrainConfig(objective=objective, seq_len=32, minutes=1.0)
    rows = []
    original = built.make_batch
    monkeypatch.setattr(built, "make_batch",
                        lambda ids, *a: rows.append(len(ids)) or original(ids, *a))
    # A clock under the test's control: the timed micro-batch takes 0.25 s.
    readings = iter([100.0, 100.25])
    monkeypatch.setattr(step, "time", SimpleNamespace(perf_counter=lambda: next(readings)))
    steps = pretraining._all_ranks_steps(cfg.budget, cfg, ONE_PROCESS, model, built, special,
                                         micro_size=2, accumulation=4)
    assert rows == [2]  # timed once (the run's deadline corrects it), on one micro-batch
    assert next(readings, None) is None  # the timing read the clock twice
    # the timing, times 4 micro-batches per step, fills the minute
    assert steps == steps_in_minutes(1.0, 4 * 0.25 * step.STEP_OVERHEAD) == 52
    assert all(p.grad is None for p in model.parameters())


def test_the_smaller_of_the_step_and_minute_budgets_wins(monkeypatch):
    special = SpecialTokens.layout(300)
    built = build_objective("clm", special)
    model = LanguageModel(preset("gpt2-tiny", 300, 32), heads=built.heads)
    # 1 s per micro-batch: 60 / (2 × 1 × overhead) = 26 steps in a minute
    monkeypatch.setattr(step, "time",
                        SimpleNamespace(perf_counter=iter([5.0, 6.0]).__next__))
    timed = dict(env=ONE_PROCESS, model=model, objective=built, special=special, micro_size=2,
                 accumulation=2)
    config = TrainConfig(objective="clm", seq_len=32, minutes=1.0, steps=10)
    assert pretraining._all_ranks_steps(config.budget, config, **timed) == 10
    monkeypatch.setattr(step, "time",
                        SimpleNamespace(perf_counter=iter([5.0, 6.0]).__next__))
    config = TrainConfig(objective="clm", seq_len=32, minutes=1.0, steps=500)
    assert pretraining._all_ranks_steps(config.budget, config, **timed) == 26


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_deadline_follows_the_pace_of_the_steps_taken():
    clock = Clock()
    deadline = Deadline(minutes=1.0, clock=clock)
    clock.now = 10.0  # 10 steps in 10 s: 50 more fit in the 50 s left
    assert deadline.total_steps(10) == 60
    clock.now = 40.0  # the machine got busy: 20 steps in 40 s, 10 more in the 20 s left
    assert deadline.total_steps(20) == 30
    deadline.validated(started=38.0)  # a validation of 2 s is kept back for the end
    assert deadline.total_steps(20) == 29
    clock.now = 70.0  # past the end: stop at this step
    assert deadline.total_steps(25) == 25
    clock.now = 0.0
    capped = Deadline(minutes=1.0, cap=12, clock=clock)  # a step or token budget too
    clock.now = 10.0
    assert capped.total_steps(10) == 12


def test_a_deadline_spreads_its_validations_over_the_time():
    clock = Clock()
    deadline = Deadline(minutes=1.0, validations=12, clock=clock)
    due = []
    for second in range(1, 61):
        clock.now = float(second)
        if deadline.validation_due():
            due.append(second)
            deadline.validated(started=clock.now)
    assert due == list(range(5, 61, 5))
    clock.now = 0.0
    slow = Deadline(minutes=1.0, validations=12, clock=clock)
    clock.now = 8.0
    assert slow.validation_due()
    slow.validated(started=5.0)  # 3 s each: at most one every 15 s, a fifth of the time
    clock.now = 22.0
    assert not slow.validation_due()
    clock.now = 23.0
    assert slow.validation_due()
    assert not Deadline(minutes=1.0, clock=clock).validation_due()  # none asked for


def started(total_steps: int = 0) -> Started:
    """A run as setup's start leaves it: new, or resumed at its planned `total_steps`."""
    return Started(config=None, train_model=None, optimizer=None,
                   state=LoopState(step=total_steps // 2, total_steps=total_steps),
                   resumed=total_steps > 0)


def test_a_task_run_plans_its_length_as_pre_training_does(capsys):
    """Fine-tuning and distillation: a time budget plans the steps a timed step fits into it
    (at most the cap their steps or epochs allow) and the Deadline that corrects them; a
    resumed run keeps its plan."""
    new = started()
    deadline = plan_length(new, minutes=1.0, cap=1000, time_step=lambda: 0.5, eval_every=None,
                           env=ONE_PROCESS)
    assert new.state.total_steps == 120  # 60 s at 0.5 s a step
    assert (deadline.seconds, deadline.cap, deadline.validations) == (60.0, 1000, 12)
    assert capsys.readouterr().out == "timing one training step to fit the run into 1 minutes\n"
    capped = started()
    assert plan_length(capped, 1.0, 50, lambda: 0.5, eval_every=5,
                       env=ONE_PROCESS).validations == 0  # told how often to validate
    assert capped.state.total_steps == 50
    untimed = started()
    assert plan_length(untimed, None, 300, lambda: pytest.fail("timed without a budget"),
                       None, ONE_PROCESS) is None
    assert untimed.state.total_steps == 300
    resumed = started(total_steps=80)
    assert plan_length(resumed, 1.0, 1000, lambda: pytest.fail("a resumed run is not timed"),
                       None, ONE_PROCESS) is None
    assert resumed.state.total_steps == 80
