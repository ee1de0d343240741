"""nn.Linear whose CPU matrix multiplies take the fastest path measured for their shape: oneDNN
for training-size fp32 products and for batched decoding, a cached transposed weight for one
row (decoding one sequence).

On CPUs where PyTorch's fp32 GEMM goes through MKL's generic path (AMD EPYC, for one), oneDNN's
kernels for the same shapes are markedly faster, and a transformer step is mostly these GEMMs.
PyTorch routes bf16 matmuls to oneDNN already, but fp32 ones only when reduced precision is
allowed; this keeps full fp32 and calls oneDNN's linear primitive directly, forward and
backward. On Intel CPUs MKL's own kernels are the faster ones, so there, as anywhere else (GPU,
autocast, torch.compile, no oneDNN, LMLAB_ONEDNN=0), it is plain F.linear unless LMLAB_ONEDNN=1.
tests/test_onednn_linear.py holds both paths equal to F.linear.
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lmlab.kernels.machine import cpu_vendor


def onednn_enabled() -> bool:
    """Whether fp32 CPU products go through oneDNN: as LMLAB_ONEDNN (1 or 0) says, else on
    every CPU but Intel's. It was chosen for AMD EPYC CPUs, where MKL takes a generic path; on
    an Intel Xeon (AVX-512, no AMX, 2 threads) it made training steps 7-9% slower than MKL and
    batched decoding's layers about 2x slower."""
    if not torch.backends.mkldnn.is_available():
        return False
    setting = os.environ.get("LMLAB_ONEDNN")
    if setting is not None:
        return setting != "0"
    return cpu_vendor() != "GenuineIntel"


def dnn_linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """x (N, in) @ weight (out, in)ᵀ + bias, by oneDNN."""
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


class _OneDNNLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        flat = x.reshape(-1, x.shape[-1])
        ctx.save_for_backward(flat, weight)
        ctx.has_bias, ctx.input_shape = bias is not None, x.shape
        return dnn_linear(flat, weight, bias).view(*x.shape[:-1], weight.shape[0])

    @staticmethod
    def backward(ctx, grad: Tensor):
        flat, weight = ctx.saved_tensors
        grad = grad.reshape(-1, weight.shape[0])
        grad_input = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_input = dnn_linear(grad, weight.t()).view(ctx.input_shape)  # grad · W
        if ctx.needs_input_grad[1]:
            grad_weight = dnn_linear(grad.t(), flat.t())  # gradᵀ · x
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_bias = grad.sum(0)
        return grad_input, grad_weight, grad_bias


# Rows from which training runs oneDNN (with autograd). Fewer rows in inference mode are
# decoding: one row goes by the transposed weight (oneDNN's per-call overhead made one row of a
# 256→768 layer take about twice as long), several by oneDNN without autograd.
MIN_ROWS = 256


class Linear(nn.Linear):
    """A drop-in nn.Linear (same parameters and names) with CPU fast paths: oneDNN for fp32
    training and batched decoding, and a cached transposed weight for one row in inference
    mode."""

    _transposed: Tensor | None = None
    _transposed_key: tuple | None = None

    def forward(self, x: Tensor) -> Tensor:
        if (x.device.type != "cpu" or torch.is_autocast_enabled("cpu")
                or torch.compiler.is_compiling()):
            return F.linear(x, self.weight, self.bias)
        rows = x.numel() // x.shape[-1]
        fp32_onednn = x.dtype == self.weight.dtype == torch.float32 and onednn_enabled()
        if torch.is_inference_mode_enabled() and rows < MIN_ROWS:
            if rows > 1 and fp32_onednn:  # batched decoding: 1.2x → 1.45x HF's speed at 8 rows
                return dnn_linear(x.reshape(rows, -1), self.weight, self.bias).view(
                    *x.shape[:-1], self.out_features)
            # Weights are fixed in inference mode, so a transposed copy stays valid.
            return self._by_transposed(x)
        if rows >= MIN_ROWS and fp32_onednn:
            return _OneDNNLinear.apply(x, self.weight, self.bias)
        return F.linear(x, self.weight, self.bias)

    def _by_transposed(self, x: Tensor) -> Tensor:
        """x · Wᵀ with Wᵀ stored in memory order: for one row (decoding one sequence) CPU BLAS
        multiplies by a (in, out) matrix several times faster than by the transpose of the
        (out, in) weight, and faster than oneDNN; also the few-row path without oneDNN. The
        copy is remade whenever the weight changes."""
        key = (self.weight.data_ptr(), self.weight._version, self.weight.dtype)
        if self._transposed_key != key:
            self._transposed = self.weight.detach().t().contiguous()
            self._transposed_key = key
        if self.bias is None:
            return x @ self._transposed
        return torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self._transposed).view(
            *x.shape[:-1], self._transposed.shape[1])
