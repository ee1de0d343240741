"""Learning-rate schedules and optimiser parameter groups."""

import pytest

from lmlab import LanguageModel, preset
from lmlab.train.optim import make_optimizer, parameter_groups, set_lr
from lmlab.train.schedule import Schedule


def test_warmup_start_end_midpoint_and_floor():
    cosine = Schedule("cosine", total_steps=110, warmup_steps=10, floor=0.1)
    assert cosine(0) == pytest.approx(0.1)  # first warmup step: 1/10 of the peak
    assert cosine(9) == pytest.approx(1.0)  # warmup ends at the peak
    assert cosine(10) == pytest.approx(1.0)
    assert cosine(60) == pytest.approx(0.55)  # cosine midpoint: halfway to the floor
    assert cosine(110) == cosine(500) == pytest.approx(0.1)
    linear = Schedule("linear", total_steps=110, warmup_steps=10, floor=0.0)
    assert linear(60) == pytest.approx(0.5) and linear(110) == pytest.approx(0.0)
    assert Schedule("constant", 100, 5)(50) == 1.0


def test_warmup_stable_decay():
    wsd = Schedule("wsd", total_steps=100, warmup_steps=10, floor=0.0, decay_fraction=0.2)
    assert wsd(10) == wsd(79) == 1.0
    assert wsd(90) == pytest.approx(0.5) and wsd(100) == pytest.approx(0.0)


def test_bad_schedule_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown schedule 'cosin'"):
        Schedule("cosin")
    with pytest.raises(ValueError, match="warmup_steps"):
        Schedule("cosine", total_steps=10, warmup_steps=20)


def test_weight_decay_skips_norms_biases_and_embeddings():
    model = LanguageModel(preset("bert-tiny", 64, 16), heads=("mlm", "nsp"))
    decay, no_decay = parameter_groups(list(model.parameters()), model, 0.1)
    decayed = {id(p) for p in decay["params"]}
    for name, parameter in model.named_parameters():
        expect = parameter.ndim == 2 and "embedding" not in name and "norm" not in name
        assert (id(parameter) in decayed) == expect, name
    assert no_decay["weight_decay"] == 0.0
    all_params = decay["params"] + no_decay["params"]
    assert len({id(p) for p in all_params}) == len(all_params)  # tied weights listed once


@pytest.mark.parametrize("optimizer_name", ["adamw", "muon"])
def test_embedding_lr_scale_moves_the_embeddings_alone(optimizer_name):
    model = LanguageModel(preset("modern-tiny", 64, 16), heads=("mlm",))
    optimizer = make_optimizer(model, 1e-3, name=optimizer_name, embedding_lr_scale=10.0)
    set_lr(optimizer, 2e-3)
    rates = {id(p): group["lr"] for group in optimizer.param_groups for p in group["params"]}
    embedding = model.backbone.token_embedding.weight
    assert rates[id(embedding)] == pytest.approx(2e-2)
    others = [rate for key, rate in rates.items() if key != id(embedding)]
    assert others and all(rate == pytest.approx(2e-3) for rate in others)
    assert len(rates) == len(list(model.parameters()))  # every parameter, once


def test_embedding_lr_scale_must_be_positive():
    from lmlab.config.training import TrainConfig

    with pytest.raises(ValueError, match="embedding_lr_scale must be a positive number"):
        TrainConfig(embedding_lr_scale=0.0)


def test_embeddings_learn_faster_from_random_weights_only():
    from lmlab.config.training import TrainConfig
    from lmlab.tasks.finetune_config import FinetuneConfig

    def rate(cfg):  # as the run's concrete config has it
        return cfg.concrete("fp32", False, "adamw").embedding_lr_scale

    assert rate(TrainConfig()) == 10.0
    assert rate(TrainConfig(init="runs/imported")) == 1.0
    assert rate(TrainConfig(init="runs/imported", embedding_lr_scale=3.0)) == 3.0
    assert rate(FinetuneConfig(train="t.tsv", validation="v.tsv")) == 1.0


def test_the_concrete_config_fills_what_the_device_decided():
    from lmlab.config.training import TrainConfig

    asked = TrainConfig(precision="auto", compile=None)
    concrete = asked.concrete("bf16", True, "muon")
    assert (concrete.precision, concrete.compile, concrete.optimizer,
            concrete.embedding_lr_scale) == ("bf16", True, "muon", 10.0)
    assert asked.precision == "auto"  # a new config, the asked one left as it was
