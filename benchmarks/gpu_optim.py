"""The optimizer part of benchmarks/gpu_check.py: one optimizer step of lmlab's Muon (the blocks'
matrices, AdamW for the rest) against fused AdamW alone over the same model's parameters and
gradients, interleaved, median of the repeats. The target is Muon at most 1.15x AdamW's time
for GPT-2 small."""

from __future__ import annotations

import statistics
import time

import torch
from train_speed import Shape, model_config

from lmlab import LanguageModel
from lmlab.train.optim import make_optimizer


def optimizer_steps(shape: Shape, device, steps: int, repeats: int) -> dict:
    """ms per optimizer step of AdamW and of Muon + AdamW, and their ratio."""
    model = LanguageModel(model_config("clm", shape), heads=("lm",)).to(device)
    generator = torch.Generator(device=device).manual_seed(0)
    for param in model.parameters():
        param.grad = torch.randn(param.shape, device=device, generator=generator) * 1e-3
    optimizers = {name: make_optimizer(model, 1e-4, name=name) for name in ("adamw", "muon")}
    times: dict[str, list[float]] = {name: [] for name in optimizers}
    for optimizer in optimizers.values():  # first steps make the state
        optimizer.step()
    for _ in range(repeats):
        for name, optimizer in optimizers.items():
            times[name].append(_ms_per_step(optimizer, steps, device))
    median = {name: statistics.median(values) for name, values in times.items()}
    return {"name": "gpt2-small optimizer step", "adamw_ms": median["adamw"],
            "muon_ms": median["muon"], "muon_vs_adamw": median["muon"] / median["adamw"],
            "repeats": repeats, "ms_per_step_each": times}


def _ms_per_step(optimizer, steps: int, device) -> float:
    def synchronize() -> float:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter()

    start = synchronize()
    for _ in range(steps):
        optimizer.step()
    return (synchronize() - start) / steps * 1000
