"""Muon's momentum warm-up (modded-nanogpt): 0.85 rising linearly to 0.95 over
--muon-momentum-warmup-steps, driven by the step count, so a resumed run continues it where
it stopped; 0 leaves Muon's momentum at 0.95 throughout, as before."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file

from lmlab import LanguageModel, preset
from lmlab.runs.checkpoints import list_checkpoints
from lmlab.train import entry as pretraining
from lmlab.train import loop
from lmlab.train.optim import make_optimizer, muon_momentum, set_muon_momentum
from tests.test_resume_rules import config, dataset, saved_config, train_rows  # noqa: F401


def test_momentum_rises_from_085_to_095_over_the_warmup_steps():
    assert muon_momentum(0, 10) == pytest.approx(0.85)
    assert muon_momentum(5, 10) == pytest.approx(0.90)  # half way
    assert muon_momentum(9, 10) == pytest.approx(0.94)
    assert muon_momentum(10, 10) == muon_momentum(500, 10) == 0.95  # the end, and after
    assert all(muon_momentum(step, 0) == 0.95 for step in (0, 1, 100))  # 0: no warm-up


def test_the_momentum_reaches_muon_and_only_muon():
    model = LanguageModel(preset("modern-tiny", 64, 16), heads=("lm",))
    optimizer = make_optimizer(model, 1e-3, name="muon")
    adamw, muon = optimizer.parts
    default = torch.optim.Muon([torch.nn.Parameter(torch.zeros(2, 2))])
    assert muon.param_groups[0]["momentum"] == default.param_groups[0]["momentum"] == 0.95
    adamw_groups = [dict(group, params=None) for group in adamw.param_groups]
    set_muon_momentum(optimizer, 0.875)
    assert all(group["momentum"] == 0.875 for group in muon.param_groups)
    assert [dict(group, params=None) for group in adamw.param_groups] == adamw_groups
    plain = make_optimizer(model, 1e-3, name="adamw")
    set_muon_momentum(plain, 0.875)  # nothing to warm up
    assert "momentum" not in plain.param_groups[0]


@pytest.fixture
def momenta(monkeypatch) -> list[float]:
    """The momentum the loop gives Muon before each step."""
    given = []

    def recording(optimizer, momentum):
        given.append(momentum)
        set_muon_momentum(optimizer, momentum)

    monkeypatch.setattr(loop, "set_muon_momentum", recording)
    return given


def muon_config(out, **changes):
    return config(out, optimizer="muon", muon_momentum_warmup_steps=4, steps=6, keep_last=3,
                  **changes)


def test_the_loop_warms_up_and_a_resume_continues_from_its_step(tmp_path, dataset,  # noqa: F811
                                                                 momenta):
    whole = pretraining.pretrain(muon_config(tmp_path / "whole"), dataset)
    assert momenta == pytest.approx([0.85, 0.875, 0.9, 0.925, 0.95, 0.95])
    assert saved_config(tmp_path / "whole")["train"]["muon_momentum_warmup_steps"] == 4
    cut = tmp_path / "cut" / "run"  # stopped after step 2: the resume redoes steps 3-6
    shutil.copytree(whole, cut)
    for later in list_checkpoints(cut / "checkpoints")[1:]:
        shutil.rmtree(later)
    assert [p.name for p in list_checkpoints(cut / "checkpoints")] == ["step-00000002"]
    momenta.clear()
    pretraining.pretrain(muon_config(tmp_path / "cut", resume=True), dataset)
    assert momenta == pytest.approx([0.9, 0.925, 0.95, 0.95])
    learnt = [[(row["step"], row["loss"], row["grad_norm"]) for row in train_rows(tmp_path / run)]
              for run in ("whole", "cut")]
    assert learnt[0] == learnt[1]
    final = [load_file(list_checkpoints(run / "checkpoints")[-1] / "model.safetensors")
             for run in (whole, cut)]
    assert all(torch.equal(final[0][name], final[1][name]) for name in final[0])


def test_no_warmup_keeps_095_and_runs_saved_before_the_option_resume(tmp_path, dataset,  # noqa: F811
                                                                     momenta):
    pretraining.pretrain(config(tmp_path, optimizer="muon"), dataset)
    assert momenta == [0.95] * 4
    path = tmp_path / "run" / "config.json"
    older = saved_config(tmp_path)
    del older["train"]["muon_momentum_warmup_steps"]  # as runs were saved before the option
    path.write_text(json.dumps(older))
    pretraining.pretrain(config(tmp_path, optimizer="muon", resume=True, steps=6), dataset)
    assert train_rows(tmp_path)[-1]["step"] == 6


@pytest.mark.parametrize("optimizer", ["adamw", "auto"])  # auto: adamw for masked LM
def test_a_warmup_without_muon_is_refused_in_one_line(tmp_path, dataset,  # noqa: F811
                                                      optimizer):
    with pytest.raises(ValueError, match="add --optimizer muon") as error:
        pretraining.pretrain(config(tmp_path, objective="mlm", model="bert-tiny",
                                    optimizer=optimizer, muon_momentum_warmup_steps=4), dataset)
    assert "\n" not in str(error.value)
    assert not (tmp_path / "run").exists()
    with pytest.raises(ValueError, match="muon_momentum_warmup_steps must be 0 or more"):
        config(tmp_path, muon_momentum_warmup_steps=-1)
