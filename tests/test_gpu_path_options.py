"""The options a GPU run uses change nothing the model learns: activation checkpointing gives
the same gradients, and training with it (and, in the slow set, compiled) reaches the same
losses as without, step for step."""

import pytest
import torch

from lmlab import LanguageModel, SpecialTokens, preset
from lmlab.config.training import TrainConfig
from lmlab.objectives.registry import build_objective
from lmlab.runs.metrics import read_metrics
from lmlab.train import entry as pretraining
from tests.synthetic_run import synthetic_dataset


def test_activation_checkpointing_gives_the_same_values_and_gradients():
    special = SpecialTokens.layout(200)
    objective = build_objective("mlm", special)
    torch.manual_seed(0)
    model = LanguageModel(preset("bert-tiny", 200, 32, dropout=0.1), heads=objective.heads)
    batch = objective.make_batch(torch.randint(10, 200, (4, 32)), torch.Generator().manual_seed(1))

    def loss_and_gradients(recompute: bool):
        model.backbone.checkpoint_blocks = recompute
        model.zero_grad()
        torch.manual_seed(2)  # the same dropout masks: checkpointing replays the RNG state
        outputs = model(**batch.model_inputs())
        loss = outputs["mlm"].float().square().mean()
        loss.backward()
        return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}

    loss, gradients = loss_and_gradients(False)
    recomputed_loss, recomputed = loss_and_gradients(True)
    torch.testing.assert_close(recomputed_loss, loss, rtol=0, atol=0)
    for name, gradient in gradients.items():
        torch.testing.assert_close(recomputed[name], gradient, rtol=1e-6, atol=1e-7, msg=name)


def train_losses(tmp_path, name: str, **options) -> list[float]:
    cfg = TrainConfig(objective="mlm", model="bert-tiny", seq_len=32, batch_size=8, steps=24,
                      lr=3e-3, log_every=1, eval_every=100, checkpoint_every=100,
                      out=str(tmp_path / name), **options)
    run = pretraining.pretrain(cfg, synthetic_dataset()[1])
    return [r["loss"] for r in read_metrics(run) if r["kind"] == "train"]


def test_training_with_activation_checkpointing_follows_the_same_losses(tmp_path):
    plain = train_losses(tmp_path, "plain")
    assert train_losses(tmp_path, "recomputed", activation_checkpointing=True) == \
        pytest.approx(plain, rel=1e-5)


@pytest.mark.slow
def test_training_compiled_with_activation_checkpointing_follows_the_same_losses(tmp_path):
    # without dropout: compiled code draws its random numbers from another generator
    plain = train_losses(tmp_path, "plain", model_overrides={"dropout": 0.0})
    assert train_losses(tmp_path, "compiled", activation_checkpointing=True, compile=True,
                        model_overrides={"dropout": 0.0}) == pytest.approx(plain, rel=1e-4)
