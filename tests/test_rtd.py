"""Replaced-token detection: the sampling, the loss (generator MLM + λ × discriminator BCE)
against a hand computation, the generator's shape and sharing, and its FLOP count."""

import math

import pytest
import torch

from lmlab.config.objective_options import ObjectiveOptions
from lmlab.config.presets import preset
from lmlab.config.training import TrainConfig
from lmlab.data.special_tokens import SpecialTokens
from lmlab.model import LanguageModel
from lmlab.model.flops import flops_per_token, objective_flops_per_token
from lmlab.model.generator import generator_config
from lmlab.objectives.registry import build_objective
from lmlab.objectives.rtd import NOTHING_LEARNED, base_rate_entropy, sample_tokens
from lmlab.train.entry import pretrain
from lmlab.train.step import forward_loss
from lmlab.train.validation import ValidationWarnings
from tests.synthetic_run import synthetic_dataset

SPECIAL = SpecialTokens.layout(vocab_size=64, n_sentinels=0)


def rtd_batch(seed: int = 0):
    objective = build_objective("rtd", SPECIAL)
    generator = torch.Generator().manual_seed(seed)
    ordinary = SPECIAL.ordinary_ids()
    tokens = ordinary[torch.randint(len(ordinary), (3, 16), generator=generator)]
    return objective, objective.make_batch(tokens, generator)


def test_sampling_inverts_the_cumulative_distribution():
    logits = torch.log(torch.tensor([[0.1, 0.2, 0.7], [0.5, 0.5, 0.0]]))
    # cumulative [0.1, 0.3, 1.0] and [0.5, 1.0, 1.0]
    assert sample_tokens(logits, torch.tensor([0.05, 0.49])).tolist() == [0, 0]
    assert sample_tokens(logits, torch.tensor([0.25, 0.51])).tolist() == [1, 1]
    assert sample_tokens(logits, torch.tensor([0.999, 0.99])).tolist() == [2, 1]


def test_sampling_follows_the_distribution():
    logits = torch.log(torch.tensor([[0.2, 0.3, 0.5]])).expand(20_000, 3)
    drawn = sample_tokens(logits, torch.rand(20_000, generator=torch.Generator().manual_seed(1)))
    shares = torch.bincount(drawn, minlength=3) / 20_000
    assert torch.allclose(shares, torch.tensor([0.2, 0.3, 0.5]), atol=0.015)


def test_loss_is_generator_mean_plus_lambda_times_bce_mean():
    objective, batch = rtd_batch()
    masked = batch.predict_at["generator"].flat
    real = batch.predict_at["rtd"].flat
    torch.manual_seed(0)
    outputs = {"generator": torch.randn(len(masked), 64), "rtd": torch.randn(len(real)),
               "replaced": (torch.rand(3, 16) < 0.2).float()}
    loss = objective.loss(outputs, batch)
    targets = batch.targets.flatten()[masked]
    log_probs = outputs["generator"].log_softmax(-1)
    mlm = -sum(log_probs[i, t] for i, t in enumerate(targets.tolist())) / len(masked)
    bce = 0.0
    for score, label in zip(outputs["rtd"].tolist(),
                            outputs["replaced"].flatten()[real].tolist(), strict=True):
        p = 1 / (1 + math.exp(-score))
        bce -= label * math.log(p) + (1 - label) * math.log(1 - p)
    expected = float(mlm) + 50.0 * bce / len(real)
    assert float(loss.mean()) == pytest.approx(expected, rel=1e-5)
    replaced, tokens = loss.details["replaced_fraction"]
    assert int(tokens) == len(real) and float(replaced) == outputs["replaced"].sum()


def test_padded_positions_change_neither_loss_nor_gradients():
    """A compiled step pads the generator's positions to masked LM's bound and the
    discriminator's (every real token; a row here ends in padding) to every position: the
    padding entries place no sample, score no token and count as none."""
    objective = build_objective("rtd", SPECIAL)
    generator = torch.Generator().manual_seed(0)
    ordinary = SPECIAL.ordinary_ids()
    tokens = ordinary[torch.randint(len(ordinary), (4, 32), generator=generator)]
    tokens[0, -6:] = SPECIAL.pad
    batch = objective.make_batch(tokens, generator)
    bound = objective.target_bound(4, 32)
    padded = batch.with_positions_padded(bound)
    assert padded.predict_at["generator"].flat.numel() == bound
    assert int((padded.predict_at["rtd"].flat < 0).sum()) == 6
    assert objective.target_counts(padded)["discriminator"] == 4 * 32 - 6
    torch.manual_seed(0)
    model = LanguageModel(preset("bert-tiny", 64, 32, dropout=0.0), heads=objective.heads)
    compute_loss = forward_loss(model, objective, compile_model=False)
    results = []
    for form in (batch, padded):
        model.zero_grad(set_to_none=True)
        loss = compute_loss(form)
        loss.mean().backward()
        results.append((loss.mean().detach(), loss.details["replaced_fraction"],
                        {n: p.grad.clone() for n, p in model.named_parameters()
                         if p.grad is not None}))
    (loss, replaced, gradients), (padded_loss, padded_replaced, padded_gradients) = results
    torch.testing.assert_close(padded_loss, loss, rtol=1e-5, atol=1e-6)
    for padded_figure, figure in zip(padded_replaced, replaced, strict=True):
        torch.testing.assert_close(padded_figure, figure)
    assert padded_gradients.keys() == gradients.keys()
    for name, gradient in gradients.items():
        torch.testing.assert_close(padded_gradients[name], gradient, rtol=1e-4, atol=1e-6)


def test_a_step_trains_generator_and_discriminator_with_one_shared_embedding():
    objective, batch = rtd_batch()
    cfg = preset("bert-tiny", 64, 16)
    model = LanguageModel(cfg, heads=objective.build_heads(cfg))
    generator = model.heads["generator"]
    assert generator.decoder.weight is model.backbone.token_embedding.weight
    assert generator.encoder.token_embedding[0].weight is model.backbone.token_embedding.weight
    outputs = objective.outputs(model, batch)
    replaced = outputs["replaced"].bool()
    selected = batch.targets != -100
    assert not (replaced & ~selected).any()  # only masked positions are ever replaced
    objective.loss(outputs, batch).mean().backward()
    for part in (generator.encoder.blocks[0], model.backbone.blocks[0], model.heads["rtd"]):
        assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in part.parameters())


@pytest.mark.parametrize("rate", [0.15, 0.3])
def test_the_discriminator_starts_at_the_share_it_expects_replaced(rate):
    """Its mean predicted share equals the masking rate at step 0, so its first gradients
    are about which tokens, not how many (a zero bias let bert-mini's stream collapse)."""
    objective = build_objective("rtd", SPECIAL, ObjectiveOptions(mlm_rate=rate))
    cfg = preset("bert-tiny", 64, 16)
    model = LanguageModel(cfg, heads=objective.build_heads(cfg))
    _, batch = rtd_batch()
    with torch.no_grad():
        scores = objective.outputs(model, batch)["rtd"]
    assert float(scores.sigmoid().mean()) == pytest.approx(rate, rel=0.1)


@pytest.mark.parametrize("size, layers, width, heads", [
    ("width/4", 2, 16, 1), ("width/2", 2, 32, 1), ("depth/2", 1, 64, 2)])
def test_generator_sizes(size, layers, width, heads):
    inner = generator_config(preset("bert-tiny", 64, 16), size)
    assert (inner.n_layers, inner.d_model, inner.n_heads) == (layers, width, heads)


@pytest.mark.parametrize("sharing", ["electra", "gdes"])  # GDES's residual is no matmul
def test_flops_count_the_generator(sharing):
    objective = build_objective("rtd", SPECIAL, ObjectiveOptions(rtd_sharing=sharing))
    cfg = preset("bert-mini", 64, 128)
    inner = generator_config(cfg, "width/4")
    counted = objective_flops_per_token(cfg, 128, objective, 8)
    generator = flops_per_token(inner, 128, 0.0) + 6 * cfg.d_model * 64 * 0.15
    assert counted == pytest.approx(flops_per_token(cfg, 128, 0.0) + generator)


def test_rtd_cannot_share_a_step():
    with pytest.raises(ValueError, match="cannot share steps"):
        build_objective("mix:rtd=1,mlm=1", SPECIAL)


def validation(per_token: float, share: float = 0.14) -> dict[str, float]:
    return {"rtd/discriminator_loss": 50.0 * per_token, "rtd/replaced_fraction": share}


def test_base_rate_entropy_is_the_loss_of_always_guessing_the_share():
    share = torch.tensor([0.14] * 100)
    labels = (torch.arange(100) < 14).float()
    guessing = torch.nn.functional.binary_cross_entropy(share, labels)
    assert base_rate_entropy(0.14) == pytest.approx(float(guessing), rel=1e-6)


@pytest.mark.parametrize("ratio, warned", [(1.0, True), (1.01, True),
                                           (NOTHING_LEARNED + 1e-3, True), (0.994, False),
                                           (0.5, False)])
def test_a_discriminator_at_the_base_rate_is_warned_of(ratio, warned):
    objective = build_objective("rtd", SPECIAL)
    lines = objective.warnings(validation(ratio * base_rate_entropy(0.14)))
    assert bool(lines) == warned
    assert not warned or "learned nothing" in lines[0] and "--optimizer muon" in lines[0]


def test_no_warning_without_the_discriminator_metrics():
    assert build_objective("rtd", SPECIAL).warnings({"mlm/mlm_loss": 3.0}) == []
    assert build_objective("mlm", SPECIAL).warnings(validation(1.0)) == []


def test_each_objective_warns_once_a_run():
    warnings = ValidationWarnings({"rtd": build_objective("rtd", SPECIAL)})
    stalled = validation(base_rate_entropy(0.14))
    assert len(warnings(stalled)) == 1 and warnings(stalled) == []


def test_a_run_whose_discriminator_cannot_learn_warns_once_from_half_the_run_on(
        tmp_path, capsys, monkeypatch):
    """At a learning rate too small to move it, the discriminator stays at its starting
    guess: validated at steps 2, 4 and 6, the run reads the warnings at steps 4 and 6 (from
    half the run on) and warns once."""
    read = []
    said = ValidationWarnings.__call__
    monkeypatch.setattr(ValidationWarnings, "__call__",
                        lambda self, metrics: read.append(metrics) or said(self, metrics))
    cfg = TrainConfig(objective="rtd", model="bert-tiny", out=str(tmp_path / "run"),
                      seq_len=32, batch_size=8, steps=6, lr=1e-12, eval_every=2,
                      checkpoint_every=6)
    pretrain(cfg, synthetic_dataset()[1])
    printed = capsys.readouterr().out
    assert len(read) == 2
    assert printed.count("warning: the discriminator has learned nothing") == 1
