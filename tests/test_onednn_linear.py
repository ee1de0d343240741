"""The CPU fast paths of lmlab's Linear equal F.linear: oneDNN forward and backward, and the
cached transposed weight for a few rows without gradients."""

import pytest
import torch
import torch.nn.functional as F

from lmlab import LanguageModel, MaskSpec, preset
from lmlab.kernels import linear
from lmlab.kernels.linear import MIN_ROWS, Linear, onednn_enabled

needs_onednn = pytest.mark.skipif(not torch.backends.mkldnn.is_available(),
                                  reason="this PyTorch build has no oneDNN")


@pytest.fixture
def through_onednn(monkeypatch):
    """The oneDNN path, whatever this CPU's default."""
    monkeypatch.setenv("LMLAB_ONEDNN", "1")


@needs_onednn
@pytest.mark.parametrize("vendor,setting,expected", [
    ("GenuineIntel", None, False), ("AuthenticAMD", None, True), ("", None, True),
    ("GenuineIntel", "1", True), ("AuthenticAMD", "0", False)])
def test_onednn_is_the_default_except_on_intel_unless_set(monkeypatch, vendor, setting,
                                                          expected):
    monkeypatch.setattr(linear, "cpu_vendor", lambda: vendor)
    if setting is None:
        monkeypatch.delenv("LMLAB_ONEDNN", raising=False)
    else:
        monkeypatch.setenv("LMLAB_ONEDNN", setting)
    assert onednn_enabled() is expected


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(1, 1, 24), (3, 2, 24)])  # decoding one row, and a batch
def test_few_rows_in_inference_mode_equal_plain_linear_and_follow_weight_changes(bias, shape):
    torch.manual_seed(0)
    layer = Linear(24, 40, bias=bias)
    x = torch.randn(*shape)
    with torch.inference_mode():
        torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias))
    with torch.no_grad():
        layer.weight.mul_(2)  # an optimizer step or a loaded checkpoint
    with torch.inference_mode():
        torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias))
    # The path taken: one row by the cached transposed weight, several by oneDNN.
    by_transposed = shape[0] * shape[1] == 1 or not onednn_enabled()
    assert (layer._transposed is not None) == by_transposed


@needs_onednn
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(300, 24), (3, 100, 24), (7, 24)])
def test_forward_and_gradients_equal_plain_linear(bias, shape, through_onednn):
    torch.manual_seed(0)
    layer = Linear(24, 40, bias=bias)
    x = torch.randn(*shape, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    upstream = torch.randn(*shape[:-1], 40)
    out = layer(x)
    rows = x.numel() // x.shape[-1]
    assert ("OneDNN" in type(out.grad_fn).__name__) == (rows >= MIN_ROWS)  # the path taken
    (out * upstream).sum().backward()
    grads = [x.grad] + [p.grad.clone() for p in layer.parameters()]
    layer.zero_grad()
    ref = F.linear(x_ref, layer.weight, layer.bias)
    (ref * upstream).sum().backward()
    ref_grads = [x_ref.grad] + [p.grad for p in layer.parameters()]
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    for got, expected in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


@needs_onednn
def test_a_model_step_equals_the_plain_path(monkeypatch, through_onednn):
    torch.manual_seed(0)
    model = LanguageModel(preset("gpt2-tiny", vocab_size=300, max_seq_len=MIN_ROWS,
                                       dropout=0.0), heads=("lm",))
    ids = torch.randint(0, 300, (2, MIN_ROWS))  # enough rows for the oneDNN path

    def loss_and_grads():
        model.zero_grad()
        logits = model(ids, MaskSpec("causal"))["lm"]
        loss = F.cross_entropy(logits.reshape(-1, 300), ids.reshape(-1))
        loss.backward()
        return loss, [p.grad.clone() for p in model.parameters()]

    fast_loss, fast_grads = loss_and_grads()
    monkeypatch.setenv("LMLAB_ONEDNN", "0")
    plain_loss, plain_grads = loss_and_grads()
    torch.testing.assert_close(fast_loss, plain_loss, rtol=1e-6, atol=1e-6)
    for fast, plain in zip(fast_grads, plain_grads, strict=True):
        torch.testing.assert_close(fast, plain, rtol=1e-4, atol=1e-6)
