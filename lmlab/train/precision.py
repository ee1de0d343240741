"""Mixed precision: bf16 autocast on CPU and GPU; fp16 with a gradient scaler on GPU."""

from __future__ import annotations

import contextlib

import torch


def autocast(precision: str, device: torch.device):
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


def grad_scaler(precision: str, device: torch.device) -> torch.amp.GradScaler | None:
    """fp16 gradients underflow without loss scaling; bf16 has fp32's range and needs none."""
    if precision != "fp16":
        return None
    if device.type != "cuda":
        raise ValueError("fp16 training needs a GPU; use --precision bf16 on CPU")
    return torch.amp.GradScaler("cuda")
