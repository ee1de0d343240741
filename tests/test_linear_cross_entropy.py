"""The fused, chunked projection + cross-entropy equals F.linear then F.cross_entropy: loss,
per-row losses and every gradient, across chunk boundaries, ignored rows, a bias, a scaled
upstream gradient and bf16 autocast, with ignored rows left out (CPU) or masked in place
(accelerators); and every objective's loss is the same through it."""

import pytest
import torch
import torch.nn.functional as F

import lmlab.kernels.linear_cross_entropy as fused
from lmlab.config.presets import preset
from lmlab.model import LanguageModel
from lmlab.model.heads import Unprojected
from lmlab.objectives import (
    IGNORE_INDEX,
    CausalLM,
    MaskedLM,
    MaskedLMWithNSP,
    Mixture,
    PrefixLM,
    SpanCorruption,
)
from tests.conftest import random_block, seeded

VOCAB, WIDTH, ROWS = 50, 16, 11


@pytest.fixture
def three_row_chunks(monkeypatch):
    monkeypatch.setattr(fused, "CHUNK_BYTES", 3 * 4 * VOCAB)  # 11 rows → 4 chunks, one short


def problem(bias: bool, ignored: list[int]):
    torch.manual_seed(0)
    x = torch.randn(ROWS, WIDTH, requires_grad=True)
    w = torch.randn(VOCAB, WIDTH, requires_grad=True)
    b = torch.randn(VOCAB, requires_grad=True) if bias else None
    targets = torch.randint(0, VOCAB, (ROWS,))
    targets[ignored] = IGNORE_INDEX
    return x, w, b, targets


def gradients(loss, tensors):
    return torch.autograd.grad(loss, [t for t in tensors if t is not None])


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("ignored", [[], [0, 4, 10], list(range(ROWS))])
@pytest.mark.parametrize("compacted", [True, False])  # False: as on a GPU, ignored rows masked
def test_loss_rows_and_gradients_equal_the_unfused_computation(three_row_chunks, monkeypatch,
                                                              bias, ignored, compacted):
    if not compacted:
        monkeypatch.setattr(fused, "_rows_with_targets", lambda targets: None)
    x, w, b, targets = problem(bias, ignored)
    expected_rows = F.cross_entropy(F.linear(x, w, b), targets, reduction="none")
    total, rows = fused.linear_cross_entropy(x, w, b, targets)
    torch.testing.assert_close(rows, expected_rows.detach())
    assert rows[ignored].eq(0).all()
    torch.testing.assert_close(total, expected_rows.sum())
    upstream = 2.5  # the loop divides by the global count and scales by the world size
    for got, want in zip(gradients(upstream * total, (x, w, b)),
                         gradients(upstream * expected_rows.sum(), (x, w, b)), strict=True):
        torch.testing.assert_close(got, want)


def test_bf16_autocast_matches_autocast_unfused_within_bf16_rounding(three_row_chunks):
    x, w, b, targets = problem(True, [3])
    with torch.autocast("cpu", torch.bfloat16):
        expected = F.cross_entropy(F.linear(x, w, b).float(), targets, reduction="sum")
        total, _ = fused.linear_cross_entropy(x, w, b, targets)
    torch.testing.assert_close(total, expected, rtol=1e-3, atol=1e-3)
    got, want = gradients(total, (x, w, b)), gradients(expected, (x, w, b))
    for g, e in zip(got, want, strict=True):
        assert g.dtype == torch.float32  # gradients come back in the parameters' dtype
        assert float((g - e).abs().max() / e.abs().max()) < 2e-2


def test_without_gradients_only_the_loss_is_computed(monkeypatch):
    x, w, b, targets = problem(True, [])
    accumulated = []
    original = fused._Workspace.accumulate
    monkeypatch.setattr(fused._Workspace, "accumulate",
                        lambda *a: accumulated.append(1) or original(*a))
    with torch.no_grad():  # the inputs still require gradients
        total, rows = fused.linear_cross_entropy(x, w, b, targets)
    assert not accumulated  # no gradient work
    expected = F.cross_entropy(F.linear(x, w, b), targets, reduction="none")
    torch.testing.assert_close(rows, expected.detach())
    assert not total.requires_grad
    fused.linear_cross_entropy(x, w, b, targets)[0].backward()
    assert accumulated  # the spy sees gradient work when there is some


def test_fp16_autocast_runs_unfused_so_the_grad_scaler_scale_reaches_every_gradient():
    x, w, b, targets = problem(True, [1])
    with torch.autocast("cpu", torch.float16):
        total, _ = fused.linear_cross_entropy(x, w, b, targets)
        expected = F.cross_entropy(F.linear(x, w, b).float(), targets, reduction="sum")
    assert "LinearCrossEntropy" not in type(total.grad_fn).__name__
    torch.testing.assert_close(total, expected)


OBJECTIVES = {
    "clm": lambda s: CausalLM(s),
    "mlm": lambda s: MaskedLM(s),
    "prefix": lambda s: PrefixLM(s),
    "span": lambda s: SpanCorruption(s),
    "mlm+nsp": lambda s: MaskedLMWithNSP(MaskedLM(s)),
    "mix": lambda s: Mixture([CausalLM(s), MaskedLM(s)], [1, 3]),
}


@pytest.mark.parametrize("name", sorted(OBJECTIVES))
def test_every_objective_loses_and_learns_the_same_through_the_fused_head(special, name):
    objective = OBJECTIVES[name](special)
    family = "gpt2-tiny" if name == "clm" else "bert-tiny"
    model = LanguageModel(preset(family, special.vocab_size, 64, dropout=0.0),
                          heads=objective.heads)
    tokens = random_block(special, 6, 32, seed=1)
    tokens[:, 13] = special.sep
    tokens[2, 20] = special.eos
    batch = objective.make_batch(tokens, seeded(2))
    results = []
    for unprojected in (False, True):
        outputs = model(**batch.model_inputs(), unprojected=unprojected)
        assert any(isinstance(o, Unprojected) for o in outputs.values()) == unprojected
        loss = objective.loss(outputs, batch).mean()
        model.zero_grad()
        loss.backward()
        results.append((loss.detach(), [p.grad.clone() for p in model.parameters()]))
    (plain_loss, plain_grads), (fused_loss, fused_grads) = results
    torch.testing.assert_close(fused_loss, plain_loss)
    for got, want in zip(fused_grads, plain_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)


def test_unprojected_logits_are_the_head_logits(special):
    model = LanguageModel(preset("bert-tiny", special.vocab_size, 64), heads=("mlm",)).eval()
    batch = MaskedLM(special).make_batch(random_block(special, 2, 16), seeded())
    outputs = model(**batch.model_inputs())
    unprojected = model(**batch.model_inputs(), unprojected=True)["mlm"]
    torch.testing.assert_close(unprojected.logits(), outputs["mlm"])
