"""Model FLOPs utilisation: training FLOPs per token against the device's peak.

FLOPs per token follow Kaplan et al. 2020 / PaLM (Chowdhery et al. 2022, appendix B): a
forward pass costs 2 FLOPs per weight in a matmul, the backward pass twice that (6 in all),
plus attention scores and values, 6 · 2 · layers · d_model · seq_len (i.e. 12·L·d·T; the
heads' total width stands for d_model where a config sets the head size apart).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from lmlab.atomic import write_text_atomic
from lmlab.cache import cache_dir
from lmlab.config import ModelConfig
from lmlab.kernels.linear import dnn_linear
from lmlab.kernels.machine import cpu_name
from lmlab.train.distributed import Env, from_rank_0
from lmlab.train.precision import precision_dtype

# Dense peak FLOP/s per GPU by name, (bf16/fp16 tensor core, fp32): vendor datasheets.
GPU_PEAKS = {
    "H200": (989e12, 67e12), "H100": (989e12, 67e12), "A100": (312e12, 19.5e12),
    "L40S": (362e12, 91.6e12), "L4": (121e12, 30.3e12), "A10G": (70e12, 31.2e12),
    "A10": (125e12, 31.2e12), "V100": (125e12, 15.7e12), "T4": (65e12, 8.1e12),
    "RTX 4090": (165e12, 82.6e12), "RTX 3090": (71e12, 35.6e12),
}


def flops_per_token(cfg: ModelConfig, seq_len: int, predicted_fraction: float = 1.0,
                    last_block_fraction: float = 1.0) -> float:
    """Training FLOPs per input token; `predicted_fraction` of positions run the vocabulary
    projection, as the objective counts it (`Objective.predicted_fraction`: about 0.15 for
    MLM, 0.19 for span corruption), and `last_block_fraction` run the last block past its
    attention (`Objective.last_block_fraction`). Norms, softmax and the small layers of heads
    (BERT's transform before its decoder, the NSP classifier) are left out."""
    d = cfg.d_model
    attention_width = cfg.n_heads * cfg.head_dim  # d, unless the head size is set apart
    # q and out span every head, k and v only the key/value heads: 4·d² without grouping
    attention_weights = 2 * d * (attention_width + cfg.kv_heads * cfg.head_dim)
    mlp_weights = (3 if cfg.gated else 2) * d * cfg.ffn_dim
    per_layer = 6 * (attention_weights + mlp_weights) + 12 * attention_width * seq_len
    after_attention = 6 * (d * attention_width + mlp_weights)  # output projection and MLP
    return (cfg.n_layers * per_layer - (1 - last_block_fraction) * after_attention
            + 6 * d * cfg.vocab_size * predicted_fraction)


def objective_flops_per_token(cfg: ModelConfig, seq_len: int, objective, rows: int) -> float:
    """`flops_per_token` as `objective` trains on micro-batches of `rows` rows, with the
    models it trains beside it (ELECTRA's generator)."""
    companions = sum(flops_per_token(other, seq_len, share) for other, share
                     in objective.companion_models(cfg, rows, seq_len))
    return companions + flops_per_token(cfg, seq_len, objective.predicted_fraction(rows, seq_len),
                                        objective.last_block_fraction(rows, seq_len))


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
