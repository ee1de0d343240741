"""Model FLOPs utilisation: training FLOPs per token (lmlab.model.flops) against the
device's peak, probed once per machine and cached."""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from lmlab.atomic import write_text_atomic
from lmlab.cache import cache_dir
from lmlab.kernels.linear import dnn_linear
from lmlab.kernels.machine import cpu_name
from lmlab.kernels.precision import precision_dtype
from lmlab.train.distributed import Env, from_rank_0

# Dense peak FLOP/s per GPU by name, (bf16/fp16 tensor core, fp32): vendor datasheets.
GPU_PEAKS = {
    "H200": (989e12, 67e12), "H100": (989e12, 67e12), "A100": (312e12, 19.5e12),
    "L40S": (362e12, 91.6e12), "L4": (121e12, 30.3e12), "A10G": (70e12, 31.2e12),
    "A10": (125e12, 31.2e12), "V100": (125e12, 15.7e12), "T4": (65e12, 8.1e12),
    "RTX 4090": (165e12, 82.6e12), "RTX 3090": (71e12, 35.6e12),
}


def _cache_file() -> Path:
    return cache_dir() / "peak_flops.json"


def probe_matmul_flops(dtype: torch.dtype, device: torch.device, seconds: float = 0.5,
                       multiply=torch.matmul) -> float:
    """The best FLOP/s of repeated 1024×1024 products `multiply(a, b)` over about `seconds`."""
    size = 1024
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    best, deadline = 0.0, time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        start = time.perf_counter()
        for _ in range(4):
            multiply(a, b)
        if device.type == "cuda":
            torch.cuda.synchronize()
        best = max(best, 4 * 2 * size**3 / (time.perf_counter() - start))
    return best


def probe_cpu_flops(dtype: torch.dtype) -> float:
    """The CPU's peak for `dtype`: in fp32 the better of PyTorch's own product (MKL) and
    oneDNN's, whichever lmlab runs (lmlab/kernels/linear.py), so that MFU is never measured
    against the slower library's peak."""
    cpu = torch.device("cpu")
    if dtype != torch.float32 or not torch.backends.mkldnn.is_available():
        return probe_matmul_flops(dtype, cpu, seconds=0.5, multiply=torch.matmul)
    return max(probe_matmul_flops(dtype, cpu, seconds=0.25),  # the same half second in all
               probe_matmul_flops(dtype, cpu, seconds=0.25, multiply=dnn_linear))


# This process's answer per cache key: the probe runs once per process.
_PEAKS_THIS_PROCESS: dict[str, float] = {}


def cpu_peak_flops(dtype: torch.dtype) -> float:
    """The best matmul FLOP/s measured on this (CPU, threads, dtype, torch version): probed
    once per process and kept as the maximum over processes in the cache, because a probe on
    a busy machine reads low and the peak is at least any measurement."""
    key = f"{cpu_name()}|{torch.get_num_threads()}|{dtype}|{torch.__version__}|both"
    if key not in _PEAKS_THIS_PROCESS:
        path = _cache_file()
        cache = json.loads(path.read_text()) if path.is_file() else {}
        best = max(cache.get(key, 0.0), probe_cpu_flops(dtype))
        if best != cache.get(key):
            cache[key] = best
            path.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(path, json.dumps(cache, indent=2))
        _PEAKS_THIS_PROCESS[key] = best
    return _PEAKS_THIS_PROCESS[key]


def gpu_peak_flops(name: str, dtype: torch.dtype) -> float | None:
    for known, (half, single) in GPU_PEAKS.items():
        if known in name:
            return half if dtype in (torch.bfloat16, torch.float16) else single
    return None


def device_peak_flops(device: torch.device, dtype: torch.dtype) -> float:
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        return gpu_peak_flops(name, dtype) or probe_matmul_flops(dtype, device)
    return cpu_peak_flops(dtype)


def all_ranks_peak_flops(precision: str, env: Env) -> float:
    """Every rank's peak together; rank 0 probes alone (ranks probing at once would share the
    cores and read low)."""
    peak = (device_peak_flops(env.device, precision_dtype(precision, env.device))
            if env.is_main else 0.0)
    return from_rank_0(peak, env) * env.world_size
