"""Where lmlab's training step spends its time, beside the pace of its matrix products alone.

`benchmarks/train_speed.py` gives each implementation's share of the "products alone" pace;
this says what the rest of lmlab's step is. For each objective and precision, at the reference
shape and 2 threads: the step's phases timed on the wall clock (making the batch, forward with
the fused loss's gradient, backward, the optimizer's step), then the same steps under
torch.profiler with each operator's own time (not its children's) summed into kinds: matrix
products, softmax (attention's, and the loss's maximum), the optimizer's update, norms,
activations, gathers and scatters, copies and casts, other element-wise arithmetic, and the
framework around them. The products-alone step (train_speed.py's, through PyTorch's matmul
path) is timed in the same process before and after the lmlab steps, so load hits both.

By default lmlab runs like for like with it (LMLAB_ONEDNN=0, malloc untouched), as
train_speed.py's "lmlab" row; `--as-pretrain` runs it as `lmlab pretrain` does (oneDNN fp32
linear layers except on Intel CPUs, malloc keeping freed memory), where its share of the
matmul path's pace can pass 1.

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
from train_speed import SHAPES, floor_step_fn, lmlab_parts, lmlab_step

from lmlab.kernels.linear import onednn_enabled
from lmlab.kernels.machine import keep_freed_memory

WARM_STEPS = 3  # unmeasured: the optimizer's state is made in the first, kernels are chosen
CPU = torch.device("cpu")
# An aten (or oneDNN) operator's kind by its name: the first pattern that matches.
KINDS = (("matrix products", r"^aten::(mm|addmm_?|bmm|baddbmm)$|^mkldnn::_linear_pointwise"),
         ("optimizer update", r"adam|muon|_foreach|lerp|addcdiv|addcmul"),
         ("softmax", r"softmax|amax"),
         ("norms", r"norm"),
         ("activations", r"gelu|silu|relu|tanh|sigmoid"),
         ("gathers and scatters", r"index|gather|scatter|embedding|masked|nonzero|where"),
         ("copies and casts", r"copy_|_to_copy|contiguous|clone|cat|stack"),
         ("element-wise arithmetic",
          r"^aten::(add|sub|mul|div|neg|pow|rsqrt|exp|log|sum|mean)_?$"))


def kind_of(name: str) -> str:
    """An operator's kind by its name; the optimizer's own ranges are its update, and any
    other event (autograd's engine, custom autograd functions) is the framework around the
    operators."""
    if name.startswith("Optimizer."):
        return "optimizer update"
    if not name.startswith(("aten::", "mkldnn::")):
        return "autograd and Python around the operators"
    return next((kind for kind, pattern in KINDS if re.search(pattern, name)), "other operators")


def phase_times(objective: str, setting: str, steps: int) -> dict[str, float]:
    """Milliseconds per step of each phase, timed apart on the wall clock."""
    parts = lmlab_parts(objective, False, SHAPES["reference"], CPU)
    names = ("batch", "forward", "backward", "optimizer")
    totals = dict.fromkeys(names, 0.0)
    for index in range(steps + WARM_STEPS):
        marks = [time.perf_counter()]
        lmlab_step(parts, setting, CPU, lambda marks=marks: marks.append(time.perf_counter()))
        if index >= WARM_STEPS:
            for name, start, end in zip(names, marks[:-1], marks[1:], strict=True):
                totals[name] += (end - start) * 1000 / steps
    return totals


def operator_kinds(objective: str, setting: str, steps: int) -> dict[str, float]:
    """Milliseconds per step of each kind of operator's own time, under torch.profiler."""
    parts = lmlab_parts(objective, False, SHAPES["reference"], CPU)
    for _ in range(WARM_STEPS):
        lmlab_step(parts, setting, CPU)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        for _ in range(steps):
            lmlab_step(parts, setting, CPU)
    kinds: dict[str, float] = {}
    for event in profile.key_averages():
        kind = kind_of(event.key)
        kinds[kind] = kinds.get(kind, 0.0) + event.self_cpu_time_total / 1000 / steps
    return dict(sorted(kinds.items(), key=lambda item: -item[1]))


def floor_time(objective: str, setting: str, steps: int) -> float:
    """Milliseconds per step of the products alone (train_speed.py's floor)."""
    step, _ = floor_step_fn(objective, False, SHAPES["reference"], CPU)
    for _ in range(WARM_STEPS):
        step(setting)
    start = time.perf_counter()
    for _ in range(steps):
        step(setting)
    return (time.perf_counter() - start) * 1000 / steps


def measure(objective: str, setting: str, steps: int) -> dict:
    """One row: the step's phases and operator kinds, and the products alone before and
    after them (their mean)."""
    floor_before = floor_time(objective, setting, steps)
    phases = phase_times(objective, setting, steps)
    kinds = operator_kinds(objective, setting, steps)
    floor_ms = (floor_before + floor_time(objective, setting, steps)) / 2
    step_ms = sum(phases.values())
    return {"objective": objective, "setting": setting, "step_ms": step_ms,
            "products_alone_ms": floor_ms, "share_of_products_alone_pace": floor_ms / step_ms,
            "phases_ms": phases, "operator_kinds_ms": kinds}


def summary(row: dict) -> str:
    return (f"{row['objective']} {row['setting']}: step {row['step_ms']:.1f} ms, products "
            f"alone {row['products_alone_ms']:.1f} ms ({row['share_of_products_alone_pace']:.0%}); "
            + ", ".join(f"{name} {ms:.1f}" for name, ms in row["phases_ms"].items())
            + "\n  operators' own time (ms/step): "
            + ", ".join(f"{kind} {ms:.1f}" for kind, ms in row["operator_kinds_ms"].items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objectives", nargs="+", default=["mlm", "clm"])
    parser.add_argument("--settings", nargs="+", default=["fp32", "bf16"],
                        choices=["fp32", "bf16"])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--as-pretrain", action="store_true",
                        help="run lmlab's step as `lmlab pretrain` does, not like for like "
                             "with the products alone")
    parser.add_argument("--out", type=Path,
                        default=Path("benchmarks/results/step_breakdown.json"))
    args = parser.parse_args()
    torch.set_num_threads(2)
    if args.as_pretrain:  # lmlab's own choices, whatever the shell says
        os.environ.pop("LMLAB_ONEDNN", None)
        os.environ.pop("LMLAB_MALLOC_TUNE", None)
        malloc_tuned = keep_freed_memory()
    else:  # as train_speed.py's "lmlab" row, which its products-alone share is of
        os.environ["LMLAB_ONEDNN"] = "0"
        malloc_tuned = False
    rows = []
    for objective in args.objectives:
        for setting in args.settings:
            rows.append(measure(objective, setting, args.steps))
            print(summary(rows[-1]), flush=True)
    facts = machine(threads=2, shape="reference", as_pretrain=args.as_pretrain,
                    onednn_fp32=onednn_enabled(), malloc_tuned=malloc_tuned)
    write_results(args.out, {"machine": facts, "rows": rows})


if __name__ == "__main__":
    main()
