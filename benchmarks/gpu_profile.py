"""Where a training step spends its device time, for benchmarks/gpu_check.py: each kernel's own
time (on a CPU, each operator's) summed into a few kinds of work, and the kernels that take
the most. Set side by side for lmlab and a baseline running the same model, the kinds say
where the two steps differ: products, attention, compiled element-wise code, the optimizer or
copies."""

from __future__ import annotations

from collections.abc import Callable

import torch

# (kind, fragments of kernel or operator names), tried in this order. Inductor's generated
# element-wise and reduction kernels come first: their names list the operations fused into
# them, attention's among them when they lay out q, k and v. Its templates (`triton_tem`) are
# products unless they are FlexAttention's; attention kernels come before products, since
# theirs may carry `cutlass`, `xmma` or `gemm` too. "copies and casts" holds dtype casts and
# fills as well as memory copies.
KINDS = (("compiled element-wise", ("triton_poi", "triton_red", "triton_per", "cpp_fused")),
         ("attention", ("flash", "fmha", "sdpa", "scaled_dot_product", "attention")),
         ("optimizer", ("multi_tensor_apply", "adam", "muon", "optimizer")),
         ("products", ("gemm", "nvjet", "cutlass", "xmma", "cublas", "triton_tem", "aten::mm",
                       "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::linear", "mkldnn")),
         ("copies and casts", ("memcpy", "memset", "copy", "fill")))
OTHER = "other"


def kernel_kind(name: str) -> str:
    """The kind of work a kernel (or CPU operator) of this name does; OTHER if none fits."""
    lowered = name.lower()
    for kind, fragments in KINDS:
        if any(fragment in lowered for fragment in fragments):
            return kind
    return OTHER


def step_profile(step: Callable[[], None], device: torch.device, steps: int = 3,
                 count: int = 10) -> dict:
    """`steps` steps under torch.profiler: ms per step by kind of work, and the `count`
    kernels (on a CPU: operators) with the most time of their own, each with its ms per step
    and share of the total."""
    from torch.profiler import ProfilerActivity, profile

    on_gpu = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    with profile(activities=activities) as profiler:
        for _ in range(steps):
            step()
        if on_gpu:
            torch.cuda.synchronize(device)
    own = own_times(profiler.key_averages(), on_gpu)
    total = sum(own.values()) or 1.0
    kinds: dict[str, float] = {}
    for name, microseconds in own.items():
        kind = kernel_kind(name)
        kinds[kind] = kinds.get(kind, 0.0) + microseconds / 1000 / steps
    ranked = sorted(own.items(), key=lambda item: item[1], reverse=True)[:count]
    return {"ms_per_step_by_kind": dict(sorted(kinds.items(), key=lambda kv: -kv[1])),
            "top_kernels": [{"name": name[:200], "ms_per_step": us / 1000 / steps,
                             "share": us / total} for name, us in ranked]}


def own_times(events, on_gpu: bool) -> dict[str, float]:
    """Microseconds of each kernel's own time (on a CPU, each operator's). The ranges that
    annotations (an optimizer's step, say) draw on the device's timeline are left out: they
    span kernels already counted."""
    if not on_gpu:
        return {e.key: e.self_cpu_time_total for e in events}
    return {e.key: e.self_device_time_total for e in events
            if e.device_type == torch.autograd.DeviceType.CUDA
            and not getattr(e, "is_user_annotation", False)}
