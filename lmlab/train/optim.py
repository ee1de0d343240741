"""AdamW with decoupled weight decay on matrices only (Loshchilov & Hutter 2019)."""

from __future__ import annotations

import torch
from torch import nn


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Decay the weight matrices of Linear layers; never norms, biases or embeddings
    (decaying an embedding shrinks rare tokens' vectors for no regularising benefit)."""
    no_decay_ids = set()
    for module in model.modules():
        if isinstance(module, nn.Embedding | nn.LayerNorm | nn.RMSNorm):
            no_decay_ids.update(id(p) for p in module.parameters(recurse=False))
    decay, no_decay = [], []
    for parameter in model.parameters():  # yields a tied weight once
        if not parameter.requires_grad:
            continue
        if parameter.ndim < 2 or id(parameter) in no_decay_ids:
            no_decay.append(parameter)
        else:
            decay.append(parameter)
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


def make_optimizer(model: nn.Module, lr: float, weight_decay: float = 0.1,
                   betas: tuple[float, float] = (0.9, 0.95),
                   eps: float = 1e-8) -> torch.optim.AdamW:
    """AdamW over `parameter_groups`, with the fused kernel where the device supports it."""
    device = next(model.parameters()).device
    fused = device.type in ("cuda", "cpu")
    return torch.optim.AdamW(parameter_groups(model, weight_decay), lr=lr, betas=betas,
                             eps=eps, fused=fused)
