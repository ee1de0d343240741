"""`--rtd-recipe electra`: ELECTRA's settings for each field not given (a given field wins),
its generator input (exactly 15% of the tokens, 85% of them [MASK], the rest kept), its
refusal with another objective, the generator's sampling options, and the warning before a
run shorter than the largest budget lmlab measured rtd at."""

import json
from pathlib import Path

import pytest
import torch

from lmlab.cli import build_parser, main
from lmlab.config.options import config_from_args, options_of
from lmlab.config.parsing import resolve_config
from lmlab.config.rtd_recipe import RTD_RECIPES
from lmlab.config.training import TrainConfig
from lmlab.data.special_tokens import SpecialTokens
from lmlab.objectives.registry import build_objective
from lmlab.objectives.rtd import LARGEST_MEASURED_TOKENS, NOTHING_LEARNED, Sampling
from lmlab.train.entry import pretrain
from lmlab.train.schedule import Schedule
from tests.synthetic_run import synthetic_dataset

SPECIAL = SpecialTokens.layout(vocab_size=64, n_sentinels=0)
ELECTRA = {"objective": "rtd", "rtd_recipe": "electra"}
RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"


def flat(cfg: TrainConfig) -> dict:
    options = cfg.objective_options
    return {**vars(cfg), **vars(options)}


def test_electra_gives_its_settings_to_the_fields_not_given():
    cfg = resolve_config(None, ELECTRA, TrainConfig)
    assert {name: flat(cfg)[name] for name in RTD_RECIPES["electra"]} == {
        "optimizer": "adamw", "beta2": 0.999, "weight_decay": 0.01, "schedule": "linear",
        "lr_floor": 0.0, "embedding_lr_scale": 1.0, "mlm_rate": 0.15,
        "mlm_selection": "exact", "mask_prob": 0.85, "random_prob": 0.0}


def test_lmlab_keeps_the_defaults():
    assert resolve_config(None, {"objective": "rtd"}, TrainConfig) == TrainConfig(objective="rtd")
    assert resolve_config(None, {"objective": "rtd", "rtd_recipe": "lmlab"},
                          TrainConfig) == TrainConfig(objective="rtd")


def test_a_name_that_is_no_recipe_is_refused_with_the_choices(tmp_path):
    file = tmp_path / "run.toml"
    file.write_text('rtd_recipe = "bert"\n')
    with pytest.raises(ValueError, match="rtd_recipe.*lmlab.*electra"):
        resolve_config(file, {"objective": "rtd"}, TrainConfig)


def test_a_field_given_wins_over_the_recipe(tmp_path):
    file = tmp_path / "run.yaml"
    file.write_text("rtd_recipe: electra\nweight_decay: 0.05\n")
    cfg = resolve_config(file, {"objective": "rtd", "beta2": 0.98, "mask_prob": 0.8},
                         TrainConfig)
    assert (cfg.beta2, cfg.weight_decay, cfg.objective_options.mask_prob) == (0.98, 0.05, 0.8)
    assert (cfg.schedule, cfg.objective_options.random_prob) == ("linear", 0.0)


@pytest.mark.parametrize("recipe, warmup_steps, expected", [
    ("electra", None, 30), ("lmlab", None, 15), ("electra", 7, 7), ("lmlab", 7, 7)])
def test_the_warm_up_is_a_tenth_of_the_run_under_electra(recipe, warmup_steps, expected):
    cfg = TrainConfig(objective="rtd", rtd_recipe=recipe, warmup_steps=warmup_steps)
    assert cfg.warmup_for(300) == expected


def test_a_whole_run_under_electra_warms_up_a_tenth_then_decays_linearly_to_zero(tmp_path):
    cfg = resolve_config(None, {**ELECTRA, "model": "bert-tiny", "seq_len": 32, "batch_size": 4,
                                "steps": 20, "lr": 1e-3, "log_every": 1,
                                "out": str(tmp_path / "run")}, TrainConfig)
    pretrain(cfg, synthetic_dataset()[1])
    logged = {r["step"]: r["lr"] for r in map(json.loads, (tmp_path / "run" / "metrics.jsonl")
                                              .read_text().splitlines()) if r["kind"] == "train"}
    expected = Schedule("linear", total_steps=20, warmup_steps=2, floor=0.0)
    assert sorted(logged) == list(range(1, 21))
    assert logged == pytest.approx({step: 1e-3 * expected(step - 1) for step in logged})
    assert logged[2] == pytest.approx(1e-3) and logged[20] == pytest.approx(1e-3 / 18)


def test_lmlab_warm_up_stops_at_1000_steps():
    assert TrainConfig(objective="rtd").warmup_for(100_000) == 1000
    assert TrainConfig(objective="rtd", rtd_recipe="electra").warmup_for(100_000) == 10_000


def test_electra_with_another_objective_is_refused_in_one_line(capsys):
    with pytest.raises(ValueError, match="--rtd-recipe electra .* the objective is mlm"):
        resolve_config(None, {"objective": "mlm", "rtd_recipe": "electra"}, TrainConfig)
    assert main(["pretrain", "--objective", "mlm", "--rtd-recipe", "electra"]) != 0
    error = capsys.readouterr().err.strip()
    assert "--objective rtd" in error and len(error.splitlines()) == 1


def test_the_generator_input_is_exactly_15_percent_85_of_them_masked():
    cfg = resolve_config(None, ELECTRA, TrainConfig)
    objective = build_objective("rtd", SPECIAL, cfg.objective_options)
    generator = torch.Generator().manual_seed(0)
    ordinary = SPECIAL.ordinary_ids()
    tokens = ordinary[torch.randint(len(ordinary), (64, 100), generator=generator)]
    batch = objective.make_batch(tokens, generator)
    selected = batch.predict_at["generator"].write(
        torch.ones(batch.predict_at["generator"].flat.shape[0], dtype=torch.long),
        into=torch.zeros_like(tokens)).bool()
    assert (selected.sum(1) == 15).all()  # round(0.15 × 100) in every row
    masked = batch.input_ids == SPECIAL.mask
    assert not (masked & ~selected).any()
    assert masked[selected].float().mean().item() == pytest.approx(0.85, abs=0.03)
    kept = selected & ~masked
    assert kept.any() and torch.equal(batch.input_ids[kept], tokens[kept])  # none random
    assert torch.equal(batch.input_ids[~selected], tokens[~selected])


def test_disallow_correct_never_draws_the_original_and_temperature_divides():
    logits = torch.tensor([[5.0, 1.0, 0.0], [0.0, 2.0, 4.0]])
    originals = torch.tensor([0, 2])
    ruled_out = Sampling(disallow_correct=True).logits(logits, originals).softmax(-1)
    assert ruled_out[0, 0] == 0 and ruled_out[1, 2] == 0
    assert torch.equal(Sampling(temperature=2.0).logits(logits, originals), logits / 2)
    assert torch.equal(Sampling().logits(logits, originals), logits)


def replaced_by_a_generator_sure_of_the_original(disallow_correct: bool):
    """(which tokens the samples replaced, which were masked) for a generator that puts all
    its mass on each masked position's original token."""
    objective = build_objective("rtd", SPECIAL, resolve_config(
        None, {"objective": "rtd", "rtd_disallow_correct": disallow_correct},
        TrainConfig).objective_options)
    generator = torch.Generator().manual_seed(0)
    ordinary = SPECIAL.ordinary_ids()
    tokens = ordinary[torch.randint(len(ordinary), (3, 16), generator=generator)]
    batch = objective.make_batch(tokens, generator)
    originals = batch.predict_at["generator"].read(tokens).clamp(min=0)  # (N,)

    def model(predict_at, **_):
        if "generator" in predict_at:
            logits = torch.full((len(originals), SPECIAL.vocab_size), -1e4)  # (N, V)
            logits[torch.arange(len(originals)), originals] = 1e4
            return {"generator": logits}
        return {"rtd": torch.zeros(len(predict_at["rtd"].real()), 1)}

    outputs = objective.outputs(model, batch)
    return outputs["replaced"].bool(), batch.targets != -100


def test_a_run_with_disallow_correct_replaces_every_masked_token():
    replaced, masked = replaced_by_a_generator_sure_of_the_original(disallow_correct=True)
    assert masked.any() and torch.equal(replaced, masked)
    replaced, masked = replaced_by_a_generator_sure_of_the_original(disallow_correct=False)
    assert masked.any() and not replaced.any()  # it drew each original back


@pytest.mark.parametrize("temperature", [0.0, -1.0, float("inf"), float("nan")])
def test_a_temperature_that_is_no_positive_number_is_refused(temperature):
    with pytest.raises(ValueError, match="rtd_temperature"):
        resolve_config(None, {"objective": "rtd", "rtd_temperature": temperature}, TrainConfig)


def test_the_largest_measured_budget_is_the_results_files():
    """The warning's number: the largest rtd budget of distill_sst2.json, where every seed's
    discriminator ended at the base rate."""
    rtd = json.loads((RESULTS / "distill_sst2.json").read_text())["rtd"]
    largest = max(rtd.values(), key=lambda budget: budget["budget_flops"])
    for optimizer in ("adamw", "muon"):
        if optimizer not in largest:
            continue
        ledger = largest[optimizer]["comparison"]["ledger"]
        assert {run["tokens"] for run in ledger if run["objective"] == "rtd"} == {
            LARGEST_MEASURED_TOKENS}
        assert all(run["of_base_rate"] >= NOTHING_LEARNED
                   for run in largest[optimizer]["discriminator"])


def test_a_budget_below_it_is_warned_of_and_one_at_it_is_not():
    rtd, mlm = build_objective("rtd", SPECIAL), build_objective("mlm", SPECIAL)
    (line,) = rtd.budget_warnings(LARGEST_MEASURED_TOKENS - 1)
    assert f"{LARGEST_MEASURED_TOKENS:,} tokens" in line and "consider --objective mlm" in line
    assert rtd.budget_warnings(LARGEST_MEASURED_TOKENS) == []
    assert mlm.budget_warnings(1) == []


def test_the_warning_is_printed_before_training(tmp_path, capsys):
    cfg = resolve_config(None, {**ELECTRA, "model": "bert-tiny", "seq_len": 32, "batch_size": 8,
                                "steps": 2, "out": str(tmp_path / "run")}, TrainConfig)
    pretrain(cfg, synthetic_dataset()[1])
    printed = capsys.readouterr().out
    said = printed.index("warning: rtd: lmlab has measured its discriminator")
    assert f"this run's {2 * 8 * 32:,} tokens" in printed
    assert said < printed.index("training: step 1 of 2 starts")
    saved = json.loads((tmp_path / "run" / "config.json").read_text())["train"]
    assert (saved["rtd_recipe"], saved["beta2"]) == ("electra", 0.999)


def test_a_suggested_command_repeats_the_recipe_and_what_differs_from_it():
    cfg = resolve_config(None, {**ELECTRA, "beta2": 0.95}, TrainConfig)
    words = options_of(cfg)
    assert words == ["--beta2", "0.95", "--objective", "rtd", "--rtd-recipe", "electra"]
    assert config_from_args(build_parser().parse_args(["pretrain", *words]), TrainConfig) == cfg
