"""nn.Linear whose CPU matrix multiplies take the faster of two paths: oneDNN for training-size
fp32 products, a cached transposed weight for the few rows of token-by-token decoding.

On CPUs where PyTorch's fp32 GEMM goes through MKL's generic path (AMD EPYC, for one), oneDNN's
kernels for the same shapes are markedly faster, and a transformer step is mostly these GEMMs.
PyTorch routes bf16 matmuls to oneDNN already, but fp32 ones only when reduced precision is
allowed; this keeps full fp32 and calls oneDNN's linear primitive directly, forward and
backward. Anywhere else (GPU, autocast, torch.compile, no oneDNN, LMLAB_ONEDNN=0) it is plain
F.linear. tests/test_onednn_linear.py holds both paths equal to F.linear.
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def onednn_enabled() -> bool:
    return torch.backends.mkldnn.is_available() and os.environ.get("LMLAB_ONEDNN", "1") != "0"


def _dnn_linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """x (N, in) @ weight (out, in)ᵀ + bias, by oneDNN."""
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


class _OneDNNLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        flat = x.reshape(-1, x.shape[-1])
        ctx.save_for_backward(flat, weight)
        ctx.has_bias, ctx.input_shape = bias is not None, x.shape
        return _dnn_linear(flat, weight, bias).view(*x.shape[:-1], weight.shape[0])

    @staticmethod
    def backward(ctx, grad: Tensor):
        flat, weight = ctx.saved_tensors
        grad = grad.reshape(-1, weight.shape[0])
        grad_input = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_input = _dnn_linear(grad, weight.t()).view(ctx.input_shape)  # grad · W
        if ctx.needs_input_grad[1]:
            grad_weight = _dnn_linear(grad.t(), flat.t())  # gradᵀ · x
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_bias = grad.sum(0)
        return grad_input, grad_weight, grad_bias


# Below this many rows oneDNN's per-call overhead outweighs its faster kernel (measured: one
# row of a 256→768 layer takes about twice as long), as in token-by-token decoding.
MIN_ROWS = 256


class Linear(nn.Linear):
    """A drop-in nn.Linear (same parameters and names) with two CPU fast paths: oneDNN for
    many fp32 rows, and a cached transposed weight for few rows in inference mode."""

    _transposed: Tensor | None = None
    _transposed_key: tuple | None = None

    def forward(self, x: Tensor) -> Tensor:
        if (x.device.type != "cpu" or torch.is_autocast_enabled("cpu")
                or torch.compiler.is_compiling()):
            return F.linear(x, self.weight, self.bias)
        if x.numel() < MIN_ROWS * x.shape[-1]:
            # Only in inference mode: weights are fixed there, so the copy stays valid.
            return self._few_rows(x) if torch.is_inference_mode_enabled() else F.linear(
                x, self.weight, self.bias)
        if x.dtype == self.weight.dtype == torch.float32 and onednn_enabled():
            return _OneDNNLinear.apply(x, self.weight, self.bias)
        return F.linear(x, self.weight, self.bias)

    def _few_rows(self, x: Tensor) -> Tensor:
        """x · Wᵀ with Wᵀ stored in memory order: for a few rows (token-by-token decoding) CPU
        BLAS multiplies by a (in, out) matrix several times faster than by the transpose of
        the (out, in) weight. The copy is remade whenever the weight changes."""
        key = (self.weight.data_ptr(), self.weight._version, self.weight.dtype)
        if self._transposed_key != key:
            self._transposed = self.weight.detach().t().contiguous()
            self._transposed_key = key
        if self.bias is None:
            return x @ self._transposed
        return torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self._transposed).view(
            *x.shape[:-1], self._transposed.shape[1])
