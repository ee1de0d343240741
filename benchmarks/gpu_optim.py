"""The optimizer part of benchmarks/gpu_check.py: one optimizer step of lmlab's Muon (the blocks'
matrices, AdamW for the rest) against fused AdamW alone over the same model's parameters and
gradients, interleaved, median of the repeats. The target is Muon at most 1.15x AdamW's time
for GPT-2 small. Beside it, the floor that arithmetic sets: the Newton-Schulz iterations'
products alone, at the device's peak."""

from __future__ import annotations

import statistics
import time

import torch
from train_speed import Shape, model_config

from lmlab import LanguageModel
from lmlab.train.optim import hidden_matrices, make_optimizer


def optimizer_steps(shape: Shape, device, steps: int, repeats: int, peak: float) -> dict:
    """ms per optimizer step of AdamW and of Muon + AdamW, their ratio, and the ms that Muon's
    Newton-Schulz products alone take at `peak` FLOP/s."""
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
    muon = optimizers["muon"].parts[1]
    flops = newton_schulz_flops([p.shape for p in hidden_matrices(model)],
                                muon.defaults["ns_steps"])
    return {"name": "gpt2-small optimizer step", "adamw_ms": median["adamw"],
            "muon_ms": median["muon"], "muon_vs_adamw": median["muon"] / median["adamw"],
            "newton_schulz_tflop": flops / 1e12, "newton_schulz_ms_at_peak": flops / peak * 1e3,
            "repeats": repeats, "ms_per_step_each": times}


def newton_schulz_flops(shapes: list[torch.Size], steps: int) -> float:
    """FLOPs of `steps` quintic Newton-Schulz iterations over matrices of these shapes: each
    iteration on a (short, long) matrix X forms X·Xᵀ (2·s²·l), its square (2·s³) and the
    product with X (2·s²·l)."""
    total = 0.0
    for shape in shapes:
        short, long = sorted(shape)
        total += steps * (4 * short**2 * long + 2 * short**3)
    return total


def _ms_per_step(optimizer, steps: int, device) -> float:
    def synchronize() -> float:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter()

    start = synchronize()
    for _ in range(steps):
        optimizer.step()
    return (synchronize() - start) / steps * 1000
