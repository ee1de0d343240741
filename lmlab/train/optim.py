"""The optimizers: AdamW with decoupled weight decay on matrices only (Loshchilov & Hutter
2019), or Muon (Jordan et al. 2024) for the blocks' weight matrices with AdamW for the rest."""

from __future__ import annotations

import torch
from torch import nn

from lmlab.config.training import LoopConfig


def parameter_groups(parameters: list[nn.Parameter], model: nn.Module,
                     weight_decay: float, embedding_lr_scale: float = 1.0) -> list[dict]:
    """Decay the weight matrices of Linear layers; never norms, biases or embeddings
    (decaying an embedding shrinks rare tokens' vectors for no regularising benefit). With an
    `embedding_lr_scale` other than 1 the embeddings form a group of their own whose learning
    rate is that multiple of the schedule's (`set_lr`)."""
    embedding_ids, norm_ids = set(), set()
    for module in model.modules():
        if isinstance(module, nn.Embedding):
            embedding_ids.update(id(p) for p in module.parameters(recurse=False))
        elif isinstance(module, nn.LayerNorm | nn.RMSNorm):
            norm_ids.update(id(p) for p in module.parameters(recurse=False))
    scaled = embedding_ids if embedding_lr_scale != 1.0 else set()
    rest = [p for p in parameters if id(p) not in scaled]
    no_decay_ids = embedding_ids | norm_ids
    groups = [{"params": [p for p in rest if p.ndim >= 2 and id(p) not in no_decay_ids],
               "weight_decay": weight_decay},
              {"params": [p for p in rest if p.ndim < 2 or id(p) in no_decay_ids],
               "weight_decay": 0.0}]
    if scaled:
        groups.append({"params": [p for p in parameters if id(p) in scaled],
                       "weight_decay": 0.0, "lr_scale": embedding_lr_scale})
    return groups


def set_lr(optimizer, lr: float) -> None:
    """The schedule's learning rate into every group, times the group's own scale."""
    for group in optimizer.param_groups:
        group["lr"] = lr * group.get("lr_scale", 1.0)


def hidden_matrices(model: nn.Module) -> list[nn.Parameter]:
    """The 2-D weights inside the transformer blocks: what Muon orthogonalises. Embeddings,
    heads, norms and biases are not hidden matrices (as nanochat and modded-nanogpt split)."""
    return [p for block in model.backbone.blocks for p in block.parameters()
            if p.ndim == 2 and p.requires_grad]


MUON_MOMENTUM = 0.95  # torch's default, and modded-nanogpt's after its warm-up
MUON_MOMENTUM_START = 0.85  # where modded-nanogpt's momentum warm-up starts


def muon_momentum(step: int, warmup_steps: int) -> float:
    """Muon's momentum for the update at `step` (0-based): from 0.85 up to 0.95 in a straight
    line over `warmup_steps`, then 0.95, as modded-nanogpt warms it up (over its first 300
    steps); a lower momentum averages fewer of the early, fast-changing gradients."""
    if step >= warmup_steps:
        return MUON_MOMENTUM
    return MUON_MOMENTUM_START + (MUON_MOMENTUM - MUON_MOMENTUM_START) * step / warmup_steps


def set_muon_momentum(optimizer, momentum: float) -> None:
    """`momentum` into every group of the optimizer's Muon part; none: nothing to do."""
    for part in getattr(optimizer, "parts", (optimizer,)):
        if isinstance(part, Muon):
            for group in part.param_groups:
                group["momentum"] = momentum


class Optimizers:
    """Several optimizers over disjoint parameters, stepped, cleared and saved as one. The
    loop sets each group's learning rate, so every part reads the same schedule."""

    def __init__(self, *parts: torch.optim.Optimizer) -> None:
        self.parts = parts

    @property
    def param_groups(self) -> list[dict]:
        return [group for part in self.parts for group in part.param_groups]

    @property
    def state(self) -> dict:
        return {param: state for part in self.parts for param, state in part.state.items()}

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


class Muon(torch.optim.Muon):
    """torch.optim.Muon's update, scaled to AdamW's size ("match_rms_adamw", Liu et al. 2025),
    with three changes. Matrices of one shape step together: their momenta, Newton-Schulz
    iterations and updates run as batched products over the stacked matrices (a transformer's
    blocks hold a few shapes, each many times), so the step costs a few kernels per shape rather
    than a Python loop of kernels per parameter. On the CPU it orthogonalises in fp32: torch's
    bf16 is several times slower there without bf16 matrix units (measured on 2 AMD EPYC cores:
    a reference CLM step took 2.7 times as long). And like a fused optimizer it reads
    `found_inf` on the device: a step whose loss or gradients were not finite leaves weights
    and momentum as they were, with nothing read back to the host."""

    reads_found_inf = True

    def __init__(self, params, lr: float, weight_decay: float) -> None:
        super().__init__(params, lr=lr, weight_decay=weight_decay, momentum=MUON_MOMENTUM,
                         adjust_lr_fn="match_rms_adamw")

    @torch.no_grad()
    def step(self, closure=None):
        skip = getattr(self, "found_inf", None)  # a 0-d float tensor, 1 = skip, or None
        for group in self.param_groups:
            for same_shape in _by_shape(p for p in group["params"] if p.grad is not None):
                self._step_stacked(same_shape, group, skip)

    def _step_stacked(self, params: list[nn.Parameter], group: dict,
                      skip: torch.Tensor | None) -> None:
        """One Muon step of `params`, matrices of one shape, as (k, m, n) stacks."""
        momentum, lr = group["momentum"], group["lr"]
        for param in params:
            if "momentum_buffer" not in self.state[param]:
                self.state[param]["momentum_buffer"] = torch.zeros_like(param)
        buffers = [self.state[p]["momentum_buffer"] for p in params]
        weights, grads = torch.stack(params), torch.stack([p.grad for p in params])  # (k, m, n)
        before = torch.stack(buffers)
        moved = before.lerp(grads, 1 - momentum)
        update = grads.lerp(moved, momentum) if group["nesterov"] else moved
        dtype = torch.float32 if weights.device.type == "cpu" else torch.bfloat16
        update = orthogonalised(update.to(dtype), group["ns_coefficients"], group["ns_steps"],
                                group["eps"]).to(weights.dtype)
        stepped = weights.mul(1 - lr * group["weight_decay"]).add_(
            update, alpha=-lr * 0.2 * max(weights.shape[1:]) ** 0.5)
        if skip is not None:
            moved = torch.where(skip.bool(), before, moved)
            stepped = torch.where(skip.bool(), weights, stepped)
        torch._foreach_copy_(buffers, list(moved.unbind(0)))
        torch._foreach_copy_(params, list(stepped.unbind(0)))


def _by_shape(params) -> list[list[nn.Parameter]]:
    """`params` gathered by shape, dtype and device: the stacks Muon steps together."""
    groups: dict[tuple, list[nn.Parameter]] = {}
    for param in params:
        groups.setdefault((param.shape, param.dtype, param.device), []).append(param)
    return list(groups.values())


def orthogonalised(matrix: torch.Tensor, coefficients: tuple[float, float, float],
                   steps: int, eps: float) -> torch.Tensor:
    """The quintic Newton-Schulz iteration of Muon (Jordan et al. 2024) in the matrix's own
    dtype: about U·Vᵀ of its singular value decomposition U·S·Vᵀ. `matrix` is (m, n) or a
    stack (..., m, n), each orthogonalised on its own in batched products."""
    a, b, c = coefficients
    tall = matrix.shape[-2] > matrix.shape[-1]
    x = matrix.mT if tall else matrix
    shape = x.shape
    x = x.reshape(-1, *shape[-2:])  # (k, short, long)
    # spectral norm at most 1, each matrix by its own Frobenius norm
    x = x / x.norm(dim=(-2, -1), keepdim=True).clamp(min=eps)
    for _ in range(steps):
        gram = torch.bmm(x, x.mT)  # (k, short, short)
        x = torch.baddbmm(x, torch.baddbmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
    x = x.reshape(shape)
    return x.mT if tall else x


def optimizer_for(model: nn.Module, cfg: LoopConfig) -> torch.optim.Optimizer | Optimizers:
    """`make_optimizer` as a run's config (a LoopConfig, resolved) asks for it."""
    return make_optimizer(model, cfg.lr, cfg.weight_decay, betas=(0.9, cfg.beta2),
                          name=cfg.optimizer, embedding_lr_scale=cfg.embedding_lr_scale)


def make_optimizer(model: nn.Module, lr: float, weight_decay: float = 0.1,
                   betas: tuple[float, float] = (0.9, 0.95), eps: float = 1e-8,
                   name: str = "adamw", embedding_lr_scale: float = 1.0,
                   ) -> torch.optim.Optimizer | Optimizers:
    """AdamW over every trainable parameter (fused where the device supports it), or with
    `name="muon"` Muon over the hidden matrices and AdamW over the rest. Muon's step is
    scaled to AdamW's update size (Liu et al. 2025, "match_rms_adamw"), so the same learning
    rate and weight decay serve both parts; the embeddings' rate is `embedding_lr_scale`
    times it."""
    device = next(model.parameters()).device
    trainable = [p for p in model.parameters() if p.requires_grad]  # a tied weight once
    muon_ids = {id(p) for p in hidden_matrices(model)} if name == "muon" else set()
    rest = [p for p in trainable if id(p) not in muon_ids]
    adamw = torch.optim.AdamW(parameter_groups(rest, model, weight_decay, embedding_lr_scale),
                              lr=lr, betas=betas, eps=eps, fused=device.type in ("cuda", "cpu"))
    if name == "adamw":
        return adamw
    muon = Muon([p for p in trainable if id(p) in muon_ids], lr=lr, weight_decay=weight_decay)
    return Optimizers(adamw, muon)
