"""--mlm-rate-schedule (mmBERT's 30% → 15% → 5%): masking rates held in turn over equal shares
of the run, drawn at those rates; validation masks 15% as always."""

import json

import pytest
import torch

from lmlab.cli import build_parser
from lmlab.config.objective_options import ObjectiveOptions
from lmlab.config.options import config_from_args
from lmlab.config.training import TrainConfig
from lmlab.objectives import IGNORE_INDEX, MaskedLM
from lmlab.objectives.mlm import StagedRate
from lmlab.objectives.registry import build_objective
from lmlab.train import entry as pretraining
from tests.conftest import random_block, seeded
from tests.test_mlm_masking import within_binomial
from tests.test_resume_rules import config, dataset, saved_config, train_rows  # noqa: F401

MMBERT = ObjectiveOptions(mlm_rate_schedule="30,15,5")


def test_each_rate_holds_for_its_share_of_the_run():
    staged = StagedRate((0.30, 0.15, 0.05), steps=300)
    assert [staged(step) for step in (0, 99, 100, 150, 199, 200, 299, 5000)] == [
        0.30, 0.30, 0.15, 0.15, 0.15, 0.05, 0.05, 0.05]
    assert StagedRate((0.30, 0.15, 0.05))(1000) == 0.30  # until the run's length is known
    assert StagedRate((0.2, 0.1), steps=7)(3) == 0.2 and StagedRate((0.2, 0.1), steps=7)(4) == 0.1


def test_the_run_draws_30_15_and_5_percent_at_its_start_middle_and_end(special):
    objective = build_objective("mlm", special, MMBERT).for_run(300)
    assert isinstance(objective.rate, StagedRate) and objective.rate.steps == 300
    tokens = random_block(special, rows=400, length=128, seed=8)
    eligible = int((~special.special_table()[tokens]).sum())
    for step, rate in ((0, 0.30), (150, 0.15), (299, 0.05)):
        assert objective.rate_at(step) == rate
        _, targets = objective.corrupt(tokens, seeded(9), step=step)
        assert within_binomial(int((targets != IGNORE_INDEX).sum()), eligible, rate)
    assert objective.predicted_fraction(32, 128) == pytest.approx(0.5 / 3)  # the run's mean
    assert objective.target_bound(32, 128) >= 0.30 * 32 * 128  # room for the highest rate
    fixed = build_objective("mlm", special, MMBERT, total_steps=300)
    assert fixed.rate == objective.rate


def test_validation_masks_as_an_unscheduled_run_does(special):
    scheduled = build_objective("mlm", special, MMBERT).for_run(300).for_evaluation()
    plain = MaskedLM(special).for_evaluation()
    tokens = random_block(special, rows=8, length=64, seed=3)
    for step in (0, 150, 299):
        ours, theirs = (o.make_batch(tokens, seeded(5), step) for o in (scheduled, plain))
        assert torch.equal(ours.input_ids, theirs.input_ids)
        assert torch.equal(ours.targets, theirs.targets)
        assert scheduled.rate_at(step) == 0.15


def test_the_option_on_the_command_line_and_its_refusals():
    args = build_parser().parse_args(["pretrain", "--mlm-rate-schedule", "30,15,5"])
    options = config_from_args(args, TrainConfig).objective_options
    assert options.mlm_rate_schedule == "30,15,5" and options.mlm_rates == (0.30, 0.15, 0.05)
    assert ObjectiveOptions().mlm_rates is None
    for bad in ("0.3,0.15,0.05", "30,,5", "thirty", "30,150"):
        with pytest.raises(ValueError, match="give masking rates in percent from 1 to 100"):
            ObjectiveOptions(mlm_rate_schedule=bad)
    with pytest.raises(ValueError, match="--mlm-rate-schedule or --mlm-rate-start, not both"):
        ObjectiveOptions(mlm_rate_schedule="30,15", mlm_rate_start=0.3)


def masked(out, **changes) -> TrainConfig:
    return config(out, objective="mlm", model="bert-tiny", **changes)


def test_a_run_records_the_schedule_and_older_runs_resume_without_it(tmp_path,
                                                                     dataset):  # noqa: F811
    pretraining.pretrain(masked(tmp_path / "new", objective_options=MMBERT), dataset)
    options = saved_config(tmp_path / "new")["train"]["objective_options"]
    assert options["mlm_rate_schedule"] == "30,15,5"
    pretraining.pretrain(masked(tmp_path), dataset)
    path = tmp_path / "run" / "config.json"
    older = saved_config(tmp_path)
    del older["train"]["objective_options"]["mlm_rate_schedule"]  # saved before the option
    path.write_text(json.dumps(older))
    pretraining.pretrain(masked(tmp_path, resume=True, steps=6), dataset)
    assert train_rows(tmp_path)[-1]["step"] == 6
