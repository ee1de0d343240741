"""Mixed precision: bf16 autocast on CPU and GPU; fp16 with a gradient scaler on GPU. "auto"
stands for what the device resolves it to (lmlab/kernels/device_defaults.py)."""

from __future__ import annotations

import contextlib

import torch

from lmlab.kernels.device_defaults import device_facts, precision_for

PRECISION_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def concrete(precision: str, device: torch.device) -> str:
    """`precision`, with "auto" resolved on `device`."""
    if precision != "auto":
        return precision
    return str(precision_for(precision, device_facts(device)).value)


def precision_dtype(precision: str, device: torch.device) -> torch.dtype:
    return PRECISION_DTYPES[concrete(precision, device)]


def autocast(precision: str, device: torch.device):
    precision = concrete(precision, device)
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=PRECISION_DTYPES[precision])


def grad_scaler(precision: str, device: torch.device) -> torch.amp.GradScaler | None:
    """fp16 gradients underflow without loss scaling; bf16 has fp32's range and needs none."""
    if concrete(precision, device) != "fp16":
        return None
    if device.type != "cuda":
        raise ValueError("fp16 training needs a GPU; use --precision bf16 on CPU")
    return torch.amp.GradScaler("cuda")
