"""Cross-entropy of a vocabulary projection, fused and chunked: logits are never materialised.

A vocabulary head's logits (rows × vocabulary, 134 MB for 4096 rows of 8192 fp32) are written,
read by log-softmax, written again as log-probabilities, and twice more in the backward pass;
on a CPU that traffic, and the page faults of fresh buffers, cost a third of the head's time
(measured, 2 cores, fp32; half of it in bf16). Here the rows go through in chunks whose
logits stay in cache: each chunk's loss and its gradient
(softmax − one-hot) are computed at once, and the gradient is pushed straight through the
projection into the feature and weight gradients. The backward pass only scales those by the
incoming gradient, which is exact because the loss is a sum (a scalar). The same scheme is
known as fused linear cross-entropy (Liger Kernel) or cut cross-entropy (Wijmans et al. 2024).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable

IGNORE_INDEX = -100
# Rows per chunk, so that a chunk's fp32 logits take about this many bytes: small enough to
# stay in a core's cache hierarchy, large enough for efficient GEMMs (measured on 2 cores:
# 8 MB chunks beat both 1 MB and the whole 134 MB).
CHUNK_BYTES = 8 * 2**20
# On accelerators the point is memory, not cache: chunks only bound the logits held at once.
ACCELERATOR_CHUNK_BYTES = 512 * 2**20


# The whole-logits loss of a compiled GPU step (lmlab/train/step.py) holds, per logit, about
# the bf16 logits kept for the backward pass, the fp32 gradient and its bf16 copy; it runs when
# they take at most this share of the device's free memory, else the chunked loss does.
WHOLE_LOGIT_BYTES = 12
WHOLE_LOGITS_SHARE = 0.5


def whole_logits_fit(rows: int, vocab: int, device: torch.device) -> bool:
    """Whether a (rows, vocab) logits loss fits the device's free memory (WHOLE_LOGITS_SHARE);
    off CUDA, where the whole-logits loss runs only when a test forces it, always."""
    if device.type != "cuda":
        return True
    free, _ = torch.cuda.mem_get_info(device)
    return rows * vocab * WHOLE_LOGIT_BYTES <= WHOLE_LOGITS_SHARE * free


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, features: Tensor, weight: Tensor, bias: Tensor | None, targets: Tensor,
                compute_dtype: torch.dtype, grad_enabled: bool):
        ctx.dtypes = (features.dtype, weight.dtype, None if bias is None else bias.dtype)
        wants_grad = [grad_enabled and needs for needs in ctx.needs_input_grad[:3]]
        rows = features.shape[0]
        kept = _rows_with_targets(targets)
        everything = kept is None or len(kept) == rows
        x = features.to(compute_dtype) if everything else features[kept].to(compute_dtype)
        targets = targets if everything else targets[kept]
        w = weight.to(compute_dtype)
        b = None if bias is None else bias.to(compute_dtype)[:, None]
        grads = _Gradients(x, w, b, wants_grad)
        losses = torch.zeros(len(targets), dtype=torch.float32, device=x.device)
        chunk = min(_chunk_rows(w.shape[0], x.device), max(1, len(targets)))
        work = _Workspace(w.shape, chunk, compute_dtype, x.device, grads.w is not None)
        for start in range(0, len(targets), work.chunk):
            rows_here = slice(start, start + work.chunk)
            losses[rows_here] = _chunk_losses(work, w, b, x[rows_here], targets[rows_here],
                                              kept is None, grads, rows_here)
        if not everything:
            losses = torch.zeros(rows, device=x.device).index_copy_(0, kept, losses)
            if grads.x is not None:
                grads.x = torch.zeros(rows, x.shape[1], dtype=x.dtype,
                                      device=x.device).index_copy_(0, kept, grads.x)
        ctx.save_for_backward(grads.x, grads.w, None if grads.b is None else grads.b.squeeze(1))
        ctx.mark_non_differentiable(losses)
        return losses.sum(), losses

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_sum: Tensor, _grad_losses: Tensor):
        scaled = [None if g is None else (g * grad_sum).to(dtype)
                  for g, dtype in zip(ctx.saved_tensors, ctx.dtypes, strict=True)]
        return *scaled, None, None, None


class _Gradients:
    """The loss's gradients for features (rows, C), weight (V, C), bias (V, 1), each summed in
    place chunk by chunk; None where none is wanted."""

    def __init__(self, x: Tensor, w: Tensor, b: Tensor | None, wanted: list[bool]):
        self.x = torch.zeros_like(x) if wanted[0] else None
        self.w = torch.zeros_like(w, dtype=torch.float32) if wanted[1] else None
        self.b = (torch.zeros_like(b, dtype=torch.float32) if b is not None and wanted[2]
                  else None)
        self.any = any(wanted)


def _chunk_losses(work: _Workspace, w: Tensor, b: Tensor | None, x_chunk: Tensor,
                  target: Tensor, ignored_in_place: bool, grads: _Gradients,
                  rows: slice) -> Tensor:
    """The (rows,) losses of one chunk of rows, its gradients added into `grads`."""
    columns = torch.arange(len(target), device=x_chunk.device)
    wanted = (target != IGNORE_INDEX).float() if ignored_in_place else None
    if wanted is not None:  # rows kept in place: an ignored one scores class 0, × 0
        target = target.clamp(min=0)
    # Logits transposed, (vocabulary, rows): W · xᵀ runs at full GEMM speed where x · Wᵀ,
    # with its short inner dimension, does not (CPU BLAS, measured).
    product = work.product(len(target))
    if b is None:
        torch.mm(w, x_chunk.t(), out=product)
    else:
        torch.addmm(b, w, x_chunk.t(), out=product)
    logits = work.as_float(product)
    target_logits = logits[target, columns]
    peak = logits.amax(0)
    probabilities = logits.sub_(peak).exp_()  # in place: logits are not needed again
    normaliser = probabilities.sum(0)
    losses = peak + normaliser.log() - target_logits
    if wanted is not None:
        losses = losses * wanted
    if not grads.any:
        return losses
    grad_logits = probabilities.div_(normaliser)  # softmax − one-hot = d loss/d logits
    grad_logits[target, columns] -= 1
    if wanted is not None:
        grad_logits.mul_(wanted)
    if grads.b is not None:
        grads.b += grad_logits.sum(1, keepdim=True)
    grad_logits = work.as_compute(grad_logits, product)
    if grads.x is not None:
        torch.mm(grad_logits.t(), w, out=grads.x[rows])
    if grads.w is not None:
        work.accumulate(grads.w, grad_logits, x_chunk)
    return losses


def _rows_with_targets(targets: Tensor) -> Tensor | None:
    """The rows that carry a target, to leave the others out of every product; None on
    accelerators, where finding them would make the host wait for the device: there every
    row runs and the ignored ones are zeroed."""
    if targets.device.type != "cpu":
        return None
    return (targets != IGNORE_INDEX).nonzero().squeeze(1)


def _chunk_rows(vocab: int, device: torch.device) -> int:
    budget = CHUNK_BYTES if device.type == "cpu" else ACCELERATOR_CHUNK_BYTES
    return max(1, budget // (4 * vocab))


class _Workspace:
    """Buffers reused by every chunk: fresh multi-megabyte tensors per chunk would each be a
    new mapping whose pages fault in again (glibc malloc's default)."""

    def __init__(self, weight_shape: torch.Size, chunk: int, dtype: torch.dtype,
                 device: torch.device, accumulates: bool):
        self.vocab, self.chunk = weight_shape[0], chunk
        self.products = torch.empty(self.vocab * chunk, dtype=dtype, device=device)
        self.floats = self.weight_products = self.weight_floats = None
        if dtype != torch.float32:  # reduced precision: softmax and accumulation in fp32
            self.floats = torch.empty(self.vocab * chunk, device=device)
        if dtype != torch.float32 and accumulates:
            self.weight_products = torch.empty(weight_shape, dtype=dtype, device=device)
            self.weight_floats = torch.empty(weight_shape, device=device)

    def product(self, columns: int) -> Tensor:
        """An uninitialised (vocabulary, columns) buffer."""
        return self.products[:self.vocab * columns].view(self.vocab, columns)

    def as_float(self, product: Tensor) -> Tensor:
        if self.floats is None:
            return product
        return self.floats[:product.numel()].view(product.shape).copy_(product)

    def as_compute(self, grad: Tensor, product: Tensor) -> Tensor:
        return grad if self.floats is None else product.copy_(grad)

    def accumulate(self, grad_w: Tensor, grad_logits: Tensor, x_chunk: Tensor) -> None:
        """grad_w (fp32) += grad_logits · x_chunk, rounded once per chunk."""
        if self.floats is None:
            grad_w.addmm_(grad_logits, x_chunk)
            return
        torch.mm(grad_logits, x_chunk, out=self.weight_products)
        grad_w.add_(self.weight_floats.copy_(self.weight_products))


def linear_cross_entropy(features: Tensor, weight: Tensor, bias: Tensor | None,
                         targets: Tensor) -> tuple[Tensor, Tensor]:
    """Σ cross-entropy(features · weightᵀ + bias, targets) over rows whose target is not
    IGNORE_INDEX, and each row's loss (0 where ignored; not differentiable). Only the sum
    carries a gradient. Targets must lie in [0, vocabulary) or be IGNORE_INDEX (unchecked).
    Under autocast the products run in the autocast dtype, the softmax in fp32, as autocast
    runs an unfused projection and cross-entropy; under fp16 autocast it is that unfused
    computation, since gradients formed in the forward pass would miss the GradScaler's
    scale and underflow."""
    device = features.device.type
    compute_dtype = (torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device)
                     else weight.dtype)
    features, targets = features.reshape(-1, features.shape[-1]), targets.reshape(-1)
    if compute_dtype == torch.float16:
        losses = F.cross_entropy(F.linear(features, weight, bias).float(), targets,
                                 ignore_index=IGNORE_INDEX, reduction="none")
        return losses.sum(), losses.detach()
    with torch.autocast(device, enabled=False):
        return _LinearCrossEntropy.apply(features, weight, bias, targets, compute_dtype,
                                         torch.is_grad_enabled())
