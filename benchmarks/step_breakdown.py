"""Where lmlab's training step spends its time, beside the pace of its matrix products alone.

`benchmarks/train_speed.py` gives each implementation's share of the "products alone" pace;
this says what the rest of lmlab's step is. For each objective and precision, at the same
reference shape and 2 threads: the step's phases timed on the wall clock (making the batch,
forward, backward, the optimizer's step), then the same steps under torch.profiler with each
operator's own time (not its children's) summed into kinds: matrix products, attention's
kernels, the fused projection + cross-entropy's pieces, the optimizer's update, norms,
activations, gathers and scatters, and the rest. The products-alone step is timed in the same
process, between the lmlab steps, so load hits both.

    python benchmarks/step_breakdown.py                        # mlm and clm, fp32 and bf16
    python benchmarks/step_breakdown.py --objectives mlm --settings fp32 --steps 20
    python benchmarks/step_breakdown.py --as-pretrain \
        --out benchmarks/results/step_breakdown_as_pretrain.json
"""

from __future__ import annotations

import argparse
import os
import re
import time
from pathlib import Path

import torch
from record import machine, write_results
from train_speed import SHAPES, floor_step_fn, lmlab_parts, lmlab_step_fn

from lmlab.kernels.machine import keep_freed_memory

WARM_STEPS = 3  # unmeasured: the optimizer's state is made in the first, kernels are chosen
# An aten operator's kind by its name: the first pattern that matches.
KINDS = (("matrix products", r"^aten::(mm|addmm_?|bmm|baddbmm)$|^mkldnn::_linear_pointwise"),
         ("attention kernels", r"scaled_dot_product|flash_attention|_efficient_attention"),
         ("optimizer update", r"adam|muon|_foreach|lerp|addcdiv|addcmul"),
         ("log-softmax and loss", r"log_softmax|logsumexp|nll_loss|cross_entropy"),
         ("norms", r"norm"),
         ("activations", r"gelu|silu|relu|tanh|sigmoid"),
         ("gathers and scatters", r"index|gather|scatter|embedding|masked|nonzero|where"),
         ("copies and casts", r"copy_|_to_copy|contiguous|clone|cat|stack"),
         ("elementwise arithmetic", r"^aten::(add|sub|mul|div|neg|pow|rsqrt|exp|sum|mean)"),)


def kind_of(name: str) -> str:
    """An operator's kind by its name (aten's, or oneDNN's linear layer); any other event
    (autograd's engine, custom autograd functions, the optimizer's own Python) is the
    framework around the operators."""
    if "Optimizer" in name:
        return "optimizer update"
    if not name.startswith(("aten::", "mkldnn::")):
        return "autograd and Python around the operators"
    return next((kind for kind, pattern in KINDS if re.search(pattern, name)), "other operators")


def phase_times(objective: str, setting: str, steps: int) -> dict[str, float]:
    """Milliseconds per step of each phase, timed apart on the wall clock."""
    make_batch, compute_loss, optimizer, _ = lmlab_parts(objective, False, SHAPES["reference"],
                                                         torch.device("cpu"))
    totals = dict.fromkeys(("batch", "forward", "backward", "optimizer"), 0.0)
    for index in range(steps + WARM_STEPS):
        marks = [time.perf_counter()]
        batch = make_batch()
        marks.append(time.perf_counter())
        with torch.autocast("cpu", torch.bfloat16, enabled=setting == "bf16"):
            loss = compute_loss(batch).mean()
        marks.append(time.perf_counter())
        loss.backward()
        marks.append(time.perf_counter())
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        marks.append(time.perf_counter())
        if index >= WARM_STEPS:
            for name, start, end in zip(totals, marks[:-1], marks[1:], strict=True):
                totals[name] += (end - start) * 1000 / steps
    return totals


def operator_kinds(objective: str, setting: str, steps: int) -> dict[str, float]:
    """Milliseconds per step of each kind of operator's own time, under torch.profiler."""
    step, _ = lmlab_step_fn(objective, False, SHAPES["reference"], torch.device("cpu"))
    for _ in range(WARM_STEPS):
        step(setting)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        for _ in range(steps):
            step(setting)
    kinds: dict[str, float] = {}
    for event in profile.key_averages():
        kind = kind_of(event.key)
        kinds[kind] = kinds.get(kind, 0.0) + event.self_cpu_time_total / 1000 / steps
    return dict(sorted(kinds.items(), key=lambda item: -item[1]))


def floor_time(objective: str, setting: str, steps: int) -> float:
    """Milliseconds per step of the products alone (train_speed.py's floor)."""
    step, _ = floor_step_fn(objective, False, SHAPES["reference"], torch.device("cpu"))
    step(setting)
    start = time.perf_counter()
    for _ in range(steps):
        step(setting)
    return (time.perf_counter() - start) * 1000 / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objectives", nargs="+", default=["mlm", "clm"])
    parser.add_argument("--settings", nargs="+", default=["fp32", "bf16"],
                        choices=["fp32", "bf16"])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--as-pretrain", action="store_true",
                        help="run lmlab's step as `lmlab pretrain` does (oneDNN fp32 linear "
                             "layers except on Intel CPUs, malloc keeping freed memory), not "
                             "like for like with the products alone (PyTorch's matmul path)")
    parser.add_argument("--out", type=Path,
                        default=Path("benchmarks/results/step_breakdown.json"))
    args = parser.parse_args()
    torch.set_num_threads(2)
    if args.as_pretrain:
        keep_freed_memory()
    else:  # as train_speed.py's "lmlab" row, which its products-alone share is of
        os.environ["LMLAB_ONEDNN"] = "0"
    rows = []
    for objective in args.objectives:
        for setting in args.settings:
            floor_before = floor_time(objective, setting, args.steps)
            phases = phase_times(objective, setting, args.steps)
            kinds = operator_kinds(objective, setting, args.steps)
            floor_ms = min(floor_before, floor_time(objective, setting, args.steps))
            step_ms = sum(phases.values())
            rows.append({"objective": objective, "setting": setting,
                         "as_pretrain": args.as_pretrain,
                         "step_ms": step_ms, "products_alone_ms": floor_ms,
                         "share_of_products_alone_pace": floor_ms / step_ms,
                         "phases_ms": phases, "operator_kinds_ms": kinds})
            print(f"{objective} {setting}: step {step_ms:.1f} ms, products alone "
                  f"{floor_ms:.1f} ms ({floor_ms / step_ms:.0%}); "
                  + ", ".join(f"{name} {ms:.1f}" for name, ms in phases.items())
                  + "\n  operators' own time (ms/step): "
                  + ", ".join(f"{kind} {ms:.1f}" for kind, ms in kinds.items()), flush=True)
    write_results(args.out, {"machine": machine(threads=2, shape="reference"), "rows": rows})


if __name__ == "__main__":
    main()
