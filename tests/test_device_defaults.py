"""--precision auto and --compile auto: what they resolve to on each kind of device (facts of a
GPU given, so the GPU's branch is tested on a CPU), how the command line spells them, and what a
CPU run records and says."""

import json

import pytest

from lmlab.config.options import add_config_options
from lmlab.config.parsing import field_specs, parse_value
from lmlab.config.training import TrainConfig
from lmlab.kernels.device_defaults import DeviceFacts, compile_for, precision_for
from lmlab.train import entry as pretraining
from tests.synthetic_run import synthetic_dataset

H100 = DeviceFacts("cuda", "NVIDIA H100 80GB HBM3", (9, 0))
V100 = DeviceFacts("cuda", "Tesla V100-SXM2-16GB", (7, 0))
CPU = DeviceFacts("cpu", "cpu")


@pytest.mark.parametrize("facts, precision, compiled", [
    (H100, "bf16", True), (DeviceFacts("cuda", "NVIDIA A100", (8, 0)), "bf16", True),
    (V100, "fp32", True), (CPU, "fp32", False), (DeviceFacts("mps", "mps"), "fp32", False)])
def test_auto_resolves_by_the_device(facts, precision, compiled):
    assert precision_for("auto", facts).value == precision
    assert compile_for(None, facts).value is compiled
    assert precision_for("auto", facts).reason and compile_for(None, facts).reason


def test_what_is_asked_is_kept_on_every_device():
    for facts in (H100, V100, CPU):
        assert precision_for("fp32", facts).value == "fp32"
        assert precision_for("bf16", facts).value == "bf16"
        assert compile_for(False, facts).value is False
        assert compile_for(True, facts).value is True


def test_the_defaults_are_auto():
    cfg = TrainConfig()
    assert cfg.precision == "auto" and cfg.compile is None


@pytest.mark.parametrize("given, value", [([], None), (["--compile"], True),
                                          (["--compile", "false"], False),
                                          (["--compile", "auto"], None),
                                          (["--compile", "true"], True)])
def test_compile_is_a_switch_that_also_takes_true_false_or_auto(given, value):
    import argparse

    parser = argparse.ArgumentParser()
    add_config_options(parser, {"compile": field_specs(TrainConfig)["compile"]})
    text = parser.parse_args(given).compile
    assert (None if text is None else parse_value("compile", text, TrainConfig)) == value


def test_a_cpu_run_says_and_records_fp32_and_eager(tmp_path, capsys):
    cfg = TrainConfig(objective="clm", model="gpt2-tiny", seq_len=16, batch_size=4, steps=2,
                      eval_every=100, out=str(tmp_path / "run"))
    run = pretraining.pretrain(cfg, synthetic_dataset()[1])
    said = capsys.readouterr().out.splitlines()
    assert said[0].startswith("precision fp32: fp32 on the cpu")
    assert said[1].startswith("compile off: eager on the cpu")
    train = json.loads((run / "config.json").read_text())["train"]
    assert train["precision"] == "fp32" and train["compile"] is False
