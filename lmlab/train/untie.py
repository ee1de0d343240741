"""Untying the output head late in a run (--untie-at, modded-nanogpt): a head tied to the
token embedding trains as one table with it until a fraction of the steps, then becomes a
copy of it that trains apart. The optimizer is rebuilt as a run of the untied model builds
it, every moment carried over and the new head's a copy of the table's, so that a run
resumed after the point (whose checkpoints hold the head apart, lmlab/runs/checkpoints.py)
continues as the uninterrupted run does."""

from __future__ import annotations

import torch

from lmlab.config.training import LoopConfig
from lmlab.model import LanguageModel
from lmlab.train.optim import optimizer_for


def untie_step(fraction: float, total_steps: int) -> int:
    """The step (0-based) that trains the head apart first."""
    return round(fraction * total_steps)


def check_untie(fraction: float | None, model: LanguageModel, distributed: bool,
                tokens: str | None) -> None:
    """Refuse --untie-at `fraction` (None: not asked for) where there is no tied head to
    untie, under DDP/FSDP2, whose wrap holds the parameters it was given, or with a token
    budget counted from the parameters, which untying adds to (a resume after the point would
    plan another run)."""
    if fraction is None:
        return
    if tokens == "chinchilla":
        raise ValueError("--untie-at adds parameters mid-run, and --tokens chinchilla counts "
                         "them; give --tokens as a count or --steps")
    if not model.tied_heads():
        raise ValueError("--untie-at unties an output head tied to the token embedding, but "
                         "this model trains none; leave it out")
    if distributed:
        raise ValueError("--untie-at trains on one process only; leave it out under torchrun")


def untie_and_rebuild_optimizer(model: LanguageModel, optimizer, cfg: LoopConfig):
    """Untie `model`'s heads now; returns the optimizer rebuilt for the untied model, each
    parameter's state carried over and each new head starting from its table's."""
    copies = model.untie()
    # Inside a head warm-up the body is frozen, and an optimizer is built over what trains:
    # built over every weight, the body trains again once the warm-up ends.
    frozen = [parameter for parameter in model.parameters() if not parameter.requires_grad]
    for parameter in frozen:
        parameter.requires_grad_(True)
    rebuilt = optimizer_for(model, cfg)
    for parameter in frozen:
        parameter.requires_grad_(False)
    saved = optimizer.state
    for part in getattr(rebuilt, "parts", (rebuilt,)):
        for group in part.param_groups:
            for param in group["params"]:
                source = copies.get(param, param)
                if source in saved:
                    part.state[param] = (_copied(saved[source]) if param in copies
                                         else saved[source])
    return rebuilt


def _copied(state: dict) -> dict:
    return {key: value.clone() if isinstance(value, torch.Tensor) else value
            for key, value in state.items()}

