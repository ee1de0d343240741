"""benchmarks/gpu_check.sh, the one prepared GPU check, run end to end in its tiny CPU mode: it
writes gpu_check.json with the rows the check names, each a median of interleaved repeats,
lmlab's compile counts and top kernels, every contender's time by kind of work, the share of
its matrix products' own pace a compiled step reaches, Muon's optimizer step against AdamW's
with its Newton-Schulz floor, and `lmlab pretrain` at its defaults."""

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ROWS = ["gpt2-small clm bf16 eager", "gpt2-small clm bf16 compiled",
        "bert-base mlm bf16 compiled", "lmlab pretrain defaults"]
TINY_BATCH = (2, 32)  # rows and tokens a row of --tiny's steps


@pytest.mark.slow
def test_the_gpu_check_runs_end_to_end_on_a_cpu(tmp_path):
    env = {**os.environ, "NANOGPT": str(tmp_path / "no-nanogpt")}
    done = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), str(tmp_path / "out"), "--device",
         "cpu", "--tiny", "--steps", "1", "--warmup", "2", "--pretrain-seconds", "3"],
        env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-3000:]
    results = json.loads((tmp_path / "out" / "gpu_check.json").read_text())
    assert results["device"] and results["torch"] and results["peak_bf16_tflops"] > 0
    assert results["machine"]["cpu"]
    assert [row["name"] for row in results["rows"]] == ROWS
    timed = results["rows"][:3]
    for row in timed:
        assert row["repeats"] == 3 and 0 < row["mfu"] < 1
        assert row["vs_hf"] > 0 and row["vs_nanogpt"] is None
        assert all(len(v) == 3 for v in row["ms_per_step_each"].values())
        assert row["ms_per_step"] == sorted(row["ms_per_step_each"]["lmlab"])[1]  # the median
        assert (row["batch_size"], row["seq_len"]) == TINY_BATCH
        assert row["tokens_per_s"] == pytest.approx(
            TINY_BATCH[0] * TINY_BATCH[1] / row["ms_per_step"] * 1000)
    # the eager and the compiled row train one model on the same batches: equal FLOPs a token
    eager, compiled = timed[0], timed[1]
    assert eager["mfu"] / eager["tokens_per_s"] == pytest.approx(
        compiled["mfu"] / compiled["tokens_per_s"])
    whole = timed[0]["ms_per_step_each"]["lmlab whole logits"]
    assert timed[0]["whole_logits_vs_default"] == pytest.approx(
        timed[0]["ms_per_step"] / sorted(whole)[1])
    for row in timed[1:]:
        alone = sorted(row["ms_per_step_each"]["products alone"])[1]
        assert row["of_products_alone_pace"] == pytest.approx(alone / row["ms_per_step"])
        assert set(row["compile"]) == {"graphs_first_step", "graph_breaks",
                                       "recompiles_after_first_step"}
        assert row["compile"]["graphs_first_step"] >= 1
    for row in timed:
        kernels = row["top_kernels"]
        assert len(kernels) == 10 and all(k["ms_per_step"] >= 0 for k in kernels)
        assert sum(k["share"] for k in kernels) <= 1 + 1e-6
        by_kind = row["ms_per_step_by_kind"]
        assert set(by_kind) == set(row["ms_per_step_each"])
        assert set(by_kind) == ({"lmlab", "hf", "lmlab whole logits"} if row is timed[0]
                                else {"lmlab", "hf", "products alone"})
        assert all(kinds["products"] > 0 for kinds in by_kind.values())
    assert any("nanoGPT" in note for note in results["notes"])
    optimizer = results["optimizer"]
    assert optimizer["adamw_ms"] > 0 and optimizer["muon_ms"] > 0
    assert optimizer["muon_vs_adamw"] == pytest.approx(optimizer["muon_ms"] /
                                                       optimizer["adamw_ms"])
    assert optimizer["newton_schulz_tflop"] > 0 and optimizer["newton_schulz_ms_at_peak"] > 0
    pretrain = results["rows"][3]
    assert pretrain["tokens_per_s"] > 0 and pretrain["log_lines"] >= 1
    assert pretrain["output_head"]
