"""The optimizers: AdamW with decoupled weight decay on matrices only (Loshchilov & Hutter
2019), or Muon (Jordan et al. 2024) for the blocks' weight matrices with AdamW for the rest."""

from __future__ import annotations

import torch
from torch import nn


def parameter_groups(parameters: list[nn.Parameter], model: nn.Module,
                     weight_decay: float) -> list[dict]:
    """Decay the weight matrices of Linear layers; never norms, biases or embeddings
    (decaying an embedding shrinks rare tokens' vectors for no regularising benefit)."""
    no_decay_ids = set()
    for module in model.modules():
        if isinstance(module, nn.Embedding | nn.LayerNorm | nn.RMSNorm):
            no_decay_ids.update(id(p) for p in module.parameters(recurse=False))
    decay = [p for p in parameters if p.ndim >= 2 and id(p) not in no_decay_ids]
    no_decay = [p for p in parameters if p.ndim < 2 or id(p) in no_decay_ids]
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


def hidden_matrices(model: nn.Module) -> list[nn.Parameter]:
    """The 2-D weights inside the transformer blocks: what Muon orthogonalises. Embeddings,
    heads, norms and biases are not hidden matrices (as nanochat and modded-nanogpt split)."""
    return [p for block in model.backbone.blocks for p in block.parameters()
            if p.ndim == 2 and p.requires_grad]


class Optimizers:
    """Several optimizers over disjoint parameters, stepped, cleared and saved as one. The
    loop sets each group's learning rate, so every part reads the same schedule."""

    def __init__(self, *parts: torch.optim.Optimizer) -> None:
        self.parts = parts

    @property
    def param_groups(self) -> list[dict]:
        return [group for part in self.parts for group in part.param_groups]

    def step(self) -> None:
        for part in self.parts:
            part.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        for part in self.parts:
            part.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict:
        return {"parts": [part.state_dict() for part in self.parts]}

    def load_state_dict(self, state: dict) -> None:
        if len(state.get("parts", ())) != len(self.parts):
            raise ValueError("the saved optimizer state is not this optimizer's (was the run "
                             "started with another --optimizer?)")
        for part, saved in zip(self.parts, state["parts"], strict=True):
            part.load_state_dict(saved)


def make_optimizer(model: nn.Module, lr: float, weight_decay: float = 0.1,
                   betas: tuple[float, float] = (0.9, 0.95), eps: float = 1e-8,
                   name: str = "adamw") -> torch.optim.Optimizer | Optimizers:
    """AdamW over every trainable parameter (fused where the device supports it), or with
    `name="muon"` Muon over the hidden matrices and AdamW over the rest. Muon's step is
    scaled to AdamW's update size (Liu et al. 2025, "match_rms_adamw"), so the same learning
    rate and weight decay serve both parts."""
    device = next(model.parameters()).device
    trainable = [p for p in model.parameters() if p.requires_grad]  # a tied weight once
    muon_ids = {id(p) for p in hidden_matrices(model)} if name == "muon" else set()
    rest = [p for p in trainable if id(p) not in muon_ids]
    adamw = torch.optim.AdamW(parameter_groups(rest, model, weight_decay), lr=lr, betas=betas,
                              eps=eps, fused=device.type in ("cuda", "cpu"))
    if name == "adamw":
        return adamw
    muon = torch.optim.Muon([p for p in trainable if id(p) in muon_ids], lr=lr,
                            weight_decay=weight_decay, adjust_lr_fn="match_rms_adamw")
    return Optimizers(adamw, muon)
