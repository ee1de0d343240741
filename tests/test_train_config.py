"""Training configuration: file + overrides, validation with suggestions."""

import pytest

from lmlab.config.parsing import parse_value, resolve_config
from lmlab.config.training import TrainConfig, muon_runs_with
from lmlab.data.special_tokens import SpecialTokens
from lmlab.objectives.registry import build_objective
from lmlab.train.setup import auto_optimizer


def test_file_then_overrides(tmp_path):
    toml = tmp_path / "run.toml"
    toml.write_text('objective = "clm"\nlr = 3e-4\nsteps = 50\n')
    yaml = tmp_path / "run.yaml"
    yaml.write_text("objective: span\nbatch_size: 8\n")
    assert resolve_config(toml, {"steps": 7}, TrainConfig) == TrainConfig(objective="clm", lr=3e-4,
                                                                          steps=7)
    assert resolve_config(yaml, {}, TrainConfig).batch_size == 8


@pytest.mark.parametrize("name,text,value", [
    ("steps", "10", 10), ("lr", "3e-4", 3e-4), ("whole_word", "true", True),
    ("minutes", "none", None), ("model_overrides", '{"dropout": 0.0}', {"dropout": 0.0}),
    ("precision", "bf16", "bf16"),
])
def test_command_line_values_take_the_field_type(name, text, value):
    assert parse_value(name, text, TrainConfig) == value


@pytest.mark.parametrize("action,message", [
    (lambda tmp: resolve_config(None, {"stpes": 3}, TrainConfig),
     "unknown config field 'stpes'; did you mean 'steps'"),
    (lambda tmp: parse_value("steps", "ten", TrainConfig), "steps takes an integer, got 'ten'"),
    (lambda tmp: TrainConfig(precision="fp8"),
     "precision='fp8' is not one of auto, fp32, bf16, fp16"),
    (lambda tmp: TrainConfig(resume=True, overwrite=True), "choose --resume or --overwrite"),
    (lambda tmp: resolve_config(tmp / "missing.toml", {}, TrainConfig), "does not exist"),
])
def test_bad_configuration_is_a_clear_error(tmp_path, action, message):
    with pytest.raises(ValueError, match=message):
        action(tmp_path)


def test_unknown_field_in_a_file_is_named(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("objectve: mlm\n")
    with pytest.raises(ValueError, match="unknown config field 'objectve'; did you mean "
                                         "'objective'"):
        resolve_config(path, {}, TrainConfig)


@pytest.mark.parametrize("objective,optimizer", [
    ("clm", "muon"), ("prefix", "muon"), ("span", "muon"), ("mix:mlm=1,clm=1", "muon"),
    ("mlm", "adamw"), ("mlm+nsp", "adamw"), ("mntp", "adamw"), ("rtd", "adamw"),
])
def test_auto_optimizer_follows_what_the_objective_reads(objective, optimizer):
    reads = build_objective(objective, SpecialTokens.layout(1024, 100)).reads_only_bidirectionally
    assert auto_optimizer(muon_runs_with("ddp", "fp32"), reads) == optimizer
    # Muon's update runs neither sharded nor under a loss scaler
    assert auto_optimizer(muon_runs_with("ddp", "fp16"), reads) == "adamw"
    assert auto_optimizer(muon_runs_with("fsdp", "bf16"), reads) == "adamw"
