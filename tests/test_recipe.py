"""The training-recipe switches, each against what it promises: ReLU², QK-norm, logit soft
cap, zero-initialised projections, and Muon for the hidden matrices with AdamW for the rest."""

import copy

import pytest
import torch
import torch.nn.functional as F

from lmlab import LanguageModel, MaskSpec, preset
from lmlab.config import ModelConfig
from lmlab.config.training import TrainConfig
from lmlab.objectives.losses import cross_entropy
from lmlab.train.optim import Muon, Optimizers, hidden_matrices, make_optimizer
from lmlab.train.step import guarded_update

CAUSAL = MaskSpec("causal")


def model(family="modern", **changes) -> LanguageModel:
    torch.manual_seed(0)
    return LanguageModel(preset(f"{family}-tiny", 50, 16, **changes), heads=("lm",))


def ids(rows=2, length=12) -> torch.Tensor:
    return torch.randint(0, 50, (rows, length), generator=torch.Generator().manual_seed(1))


def test_relu_squared_mlp_squares_the_rectified_hidden_layer():
    mlp = model(activation="relu2").backbone.blocks[0].mlp
    x = torch.randn(3, 64)
    expected = mlp.down(F.relu(mlp.up(x)) ** 2)
    torch.testing.assert_close(mlp(x), expected)
    assert mlp.up.out_features == 4 * 64  # not gated: one up projection


def test_qk_norm_makes_attention_blind_to_the_scale_of_queries_and_keys():
    def rescaled_output(qk_norm: bool, scale: float) -> torch.Tensor:
        m = model(qk_norm=qk_norm)
        qkv = m.backbone.blocks[0].attn.qkv.weight
        with torch.no_grad():
            qkv[:2 * 64] *= scale  # the query and key rows (two heads of 32 each)
            return m(ids(), CAUSAL)["lm"]

    torch.testing.assert_close(rescaled_output(True, 10.0), rescaled_output(True, 1.0),
                               atol=1e-4, rtol=1e-4)
    assert not torch.allclose(rescaled_output(False, 10.0), rescaled_output(False, 1.0),
                              atol=1e-2)


def test_soft_capped_logits_stay_within_the_cap_and_the_fused_loss_agrees():
    m = model(family="gpt2", logit_softcap=2.0).eval()  # no dropout: both passes alike
    with torch.no_grad():
        m.heads["lm"].decoder.weight.mul_(500)  # raw logits far beyond the cap
    logits = m(ids(), CAUSAL)["lm"]
    assert logits.abs().max() <= 2.0 and logits.abs().max() > 1.9
    targets = ids().roll(-1, dims=1).reshape(-1)
    total, _ = cross_entropy(m(ids(), CAUSAL, unprojected=True)["lm"], targets)
    expected = F.cross_entropy(logits.reshape(-1, 50), targets, reduction="sum")
    torch.testing.assert_close(total, expected)
    total.backward()
    assert m.backbone.token_embedding.weight.grad.abs().sum() > 0


def test_zero_initialised_projections_make_every_block_start_as_the_identity():
    m = model(zero_init_projections=True)
    for block in m.backbone.blocks:
        assert not block.attn.out.weight.any() and not block.mlp.down.weight.any()
        assert block.attn.qkv.weight.std() > 0 and block.mlp.up.weight.std() > 0
    x = ids()
    embedded = m.backbone.token_embedding(x)
    torch.testing.assert_close(m(x, CAUSAL)["hidden"], m.backbone.final_norm(embedded))


def test_recipe_switches_are_saved_only_when_set():
    plain = preset("modern-tiny", 50, 16)
    assert not {"qk_norm", "logit_softcap", "zero_init_projections"} & set(plain.to_dict())
    changed = plain.with_changes(qk_norm=True, logit_softcap=30.0)
    assert ModelConfig(**changed.to_dict()) == changed
    with pytest.raises(ValueError, match="logit_softcap must be 0"):
        plain.with_changes(logit_softcap=-1.0)


def test_muon_takes_the_hidden_matrices_and_adamw_everything_else():
    m = LanguageModel(preset("bert-tiny", 50, 16), heads=("mlm", "nsp"))
    optimizer = make_optimizer(m, 1e-3, name="muon")
    adamw, muon = optimizer.parts
    in_muon = {id(p) for group in muon.param_groups for p in group["params"]}
    in_adamw = {id(p) for group in adamw.param_groups for p in group["params"]}
    assert not in_muon & in_adamw
    assert in_muon | in_adamw == {id(p) for p in m.parameters()}  # tied weight once
    names = {id(p): name for name, p in m.named_parameters()}
    assert all(".blocks." in names[i] and "norm" not in names[i] for i in in_muon)
    assert {id(p) for p in hidden_matrices(m)} == in_muon and len(in_muon) == 2 * 4
    assert any("embedding" in names[i] for i in in_adamw)
    assert any("heads." in names[i] for i in in_adamw)


def learn(optimizer_name: str, steps: int) -> tuple[list[float], LanguageModel, object]:
    m = model()
    optimizer = make_optimizer(m, 3e-3, name=optimizer_name)
    batch = ids(4, 16)
    losses = []
    for _ in range(steps):
        logits = m(batch[:, :-1], CAUSAL)["lm"]
        loss = F.cross_entropy(logits.reshape(-1, 50), batch[:, 1:].reshape(-1))
        loss.backward()
        guarded_update(optimizer, None, torch.tensor(False))
        losses.append(loss.item())
    return losses, m, optimizer


def test_muon_learns_and_its_state_round_trips_for_an_exact_resume():
    losses, m, optimizer = learn("muon", 30)
    assert losses[-1] < 0.5 * losses[0]
    assert isinstance(optimizer, Optimizers)
    saved = copy.deepcopy(optimizer.state_dict())
    _, fresh, fresh_optimizer = learn("muon", 1)
    fresh.load_state_dict(m.state_dict())
    fresh_optimizer.load_state_dict(saved)
    for model_, opt in ((m, optimizer), (fresh, fresh_optimizer)):
        batch = ids(4, 16)
        loss = F.cross_entropy(model_(batch[:, :-1], CAUSAL)["lm"].reshape(-1, 50),
                               batch[:, 1:].reshape(-1))
        loss.backward()
        guarded_update(opt, None, torch.tensor(False))
    for a, b in zip(m.parameters(), fresh.parameters(), strict=True):
        assert torch.equal(a, b)
    with pytest.raises(ValueError, match="another --optimizer"):
        Optimizers(fresh_optimizer.parts[0]).load_state_dict(saved)


def test_a_skipped_step_leaves_muon_and_adamw_weights_alone():
    m = model()
    optimizer = make_optimizer(m, 1e-2, name="muon")
    before = copy.deepcopy(m.state_dict())
    m(ids(), CAUSAL)["lm"].sum().backward()
    guarded_update(optimizer, None, torch.tensor(True))
    for name, value in m.state_dict().items():
        assert torch.equal(value, before[name]), name


@pytest.mark.parametrize("setting", [dict(distributed="fsdp"), dict(precision="fp16")])
def test_muon_where_it_cannot_run_is_refused_in_one_line(setting):
    with pytest.raises(ValueError, match="--optimizer muon works with DDP") as error:
        TrainConfig(optimizer="muon", **setting)
    assert "\n" not in str(error.value)


def test_muon_on_the_cpu_takes_torchs_steps_in_fp32():
    torch.manual_seed(0)
    ours = torch.nn.Parameter(torch.randn(48, 80))
    theirs = torch.nn.Parameter(ours.detach().clone())
    reference = torch.optim.Muon([theirs], lr=1e-2, weight_decay=0.1,
                                 adjust_lr_fn="match_rms_adamw")  # orthogonalises in bf16
    optimizer = Muon([ours], lr=1e-2, weight_decay=0.1)
    start = ours.detach().clone()
    for _ in range(3):
        gradient = torch.randn(48, 80)
        ours.grad, theirs.grad = gradient.clone(), gradient.clone()
        optimizer.step()
        reference.step()
    moved = (theirs - start).abs().max()
    assert moved > 1e-2  # the steps did something
    torch.testing.assert_close(ours, theirs, atol=0.02 * moved.item(), rtol=0)
    assert optimizer.state_dict()["state"][0].keys() == {"momentum_buffer"}


def reference_muon_step(params, buffers, lr, weight_decay, momentum=0.95):
    """Muon's step one parameter at a time (the form the stacked step must equal): momentum,
    Nesterov, Newton-Schulz in fp32 on one matrix, AdamW-matched scale, decoupled decay."""
    from lmlab.train.optim import orthogonalised

    for param, buffer in zip(params, buffers, strict=True):
        buffer.lerp_(param.grad, 1 - momentum)
        update = param.grad.lerp(buffer, momentum)
        update = orthogonalised(update, (3.4445, -4.7750, 2.0315), 5, 1e-7)
        param.mul_(1 - lr * weight_decay).add_(update, alpha=-lr * 0.2 * max(param.shape) ** 0.5)


def test_muon_steps_matrices_of_one_shape_together_as_each_alone():
    torch.manual_seed(0)
    shapes = [(48, 80), (80, 48), (48, 80), (32, 32), (48, 80), (80, 48)]
    ours = [torch.nn.Parameter(torch.randn(shape)) for shape in shapes]
    theirs = [p.detach().clone() for p in ours]
    buffers = [torch.zeros_like(p) for p in theirs]
    optimizer = Muon(ours, lr=1e-2, weight_decay=0.1)
    start = [p.detach().clone() for p in ours]
    for _ in range(3):
        for mine, reference in zip(ours, theirs, strict=True):
            mine.grad = torch.randn(mine.shape)
            reference.grad = mine.grad.clone()
        optimizer.step()
        reference_muon_step(theirs, buffers, lr=1e-2, weight_decay=0.1)
    for mine, reference, before, buffer in zip(ours, theirs, start, buffers, strict=True):
        assert (mine - before).abs().max() > 1e-2
        torch.testing.assert_close(mine.detach(), reference, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(optimizer.state[mine]["momentum_buffer"], buffer)


def test_the_stacked_newton_schulz_equals_one_matrix_at_a_time():
    from lmlab.train.optim import orthogonalised

    stack = torch.randn(5, 24, 40, generator=torch.Generator().manual_seed(0))
    for matrices in (stack, stack.mT.contiguous()):
        together = orthogonalised(matrices, (3.4445, -4.7750, 2.0315), 5, 1e-7)
        alone = torch.stack([orthogonalised(m, (3.4445, -4.7750, 2.0315), 5, 1e-7)
                             for m in matrices])
        torch.testing.assert_close(together, alone, atol=1e-5, rtol=1e-5)
