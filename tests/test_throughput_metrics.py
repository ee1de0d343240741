"""FLOPs accounting, the peak probe cache, metrics log and curves plot."""

import json

import pytest
import torch

from lmlab.config import ModelConfig
from lmlab.model.flops import flops_per_token
from lmlab.runs.metrics import read_metrics
from lmlab.train import flops
from lmlab.train.reporting import MetricsLog


def test_flops_per_token_by_hand():
    cfg = ModelConfig(vocab_size=1000, n_layers=2, d_model=64, n_heads=2)
    per_layer = 6 * (4 * 64 * 64 + 2 * 64 * 256) + 12 * 64 * 128
    assert flops_per_token(cfg, 128) == 2 * per_layer + 6 * 64 * 1000
    sparse = flops_per_token(cfg, 128, predicted_fraction=0.15)
    assert flops_per_token(cfg, 128) - sparse == 6 * 64 * 1000 * 0.85


def test_cpu_peak_is_probed_once_a_process_and_the_cache_keeps_the_best(tmp_path,
                                                                         monkeypatch):
    monkeypatch.setenv("LMLAB_CACHE_DIR", str(tmp_path))
    cached = lambda: list(json.loads((tmp_path / "peak_flops.json").read_text()).values())  # noqa: E731
    probes = [1e11, 5e10, 2e11]  # quiet, then busy (reads low), then quieter still
    calls = []
    monkeypatch.setattr(flops, "probe_cpu_flops",
                        lambda dtype: calls.append(dtype) or probes[len(calls) - 1])
    monkeypatch.setattr(flops, "_PEAKS_THIS_PROCESS", {})
    assert flops.cpu_peak_flops(torch.float32) == 1e11
    assert flops.cpu_peak_flops(torch.float32) == 1e11
    assert calls == [torch.float32] and cached() == [1e11]
    for expected in (1e11, 2e11):  # a new process each time
        monkeypatch.setattr(flops, "_PEAKS_THIS_PROCESS", {})
        assert flops.cpu_peak_flops(torch.float32) == expected
        assert cached() == [expected]


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="no oneDNN in this build")
def test_the_fp32_cpu_peak_is_the_faster_library_s(monkeypatch):
    rates = {torch.matmul: 3e11, flops.dnn_linear: 2e11}
    monkeypatch.setattr(flops, "probe_matmul_flops",
                        lambda dtype, device, seconds, multiply=torch.matmul: rates[multiply])
    assert flops.probe_cpu_flops(torch.float32) == 3e11
    rates[flops.dnn_linear] = 4e11
    assert flops.probe_cpu_flops(torch.float32) == 4e11


def test_real_probe_is_positive_and_gpu_table_by_name():
    assert flops.probe_matmul_flops(torch.float32, torch.device("cpu"), 0.05) > 1e8
    assert flops.gpu_peak_flops("NVIDIA H100 80GB HBM3", torch.bfloat16) == 989e12
    assert flops.gpu_peak_flops("NVIDIA A100-SXM4-40GB", torch.float32) == 19.5e12
    assert flops.gpu_peak_flops("Mystery GPU", torch.bfloat16) is None


def test_metrics_log_truncates_redone_steps_and_plots(tmp_path):
    log = MetricsLog(tmp_path)
    for step in range(1, 6):
        log.log("train", step, loss=5.0 - step / 2, lr=1e-3)
    log.log("eval", 5, **{"clm/clm_loss": 2.0})
    log.close()
    log = MetricsLog(tmp_path)
    log.truncate_after(3)
    log.log("train", 4, loss=9.0, lr=1e-3)
    log.close()
    assert [(r["kind"], r["step"]) for r in read_metrics(tmp_path)] == [
        ("train", 1), ("train", 2), ("train", 3), ("train", 4)]
    log.plot(tmp_path / "curves.png")
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
