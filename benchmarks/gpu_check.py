"""One prepared GPU check: lmlab's training step against nanoGPT and Hugging Face on one GPU, in
one process, interleaved, and `lmlab pretrain` at its defaults. Writes OUT_DIR/gpu_check.json.

Rows (each the median of --repeats interleaved timings of --steps steps, after --warmup):

    gpt2-small clm bf16 eager      lmlab, nanoGPT (its own model.py) and GPT2LMHeadModel, and
                                   lmlab with the whole logits' loss (compiled steps' loss on
                                   CUDA) in place of the chunked loss eager steps take
    gpt2-small clm bf16 compiled   lmlab, nanoGPT and GPT2LMHeadModel, each under torch.compile
    bert-base mlm bf16 compiled    lmlab and BertForMaskedLM (masking collator), compiled
                                   (both compiled rows also time lmlab's matrix products alone,
                                   train_speed's floor: the share of their pace lmlab reaches)
    lmlab pretrain defaults        `lmlab pretrain --objective clm --model gpt2-base --seq-len
                                   1024 --batch-size 16` and nothing else, stopped after
                                   --pretrain-seconds of training: its logged tokens/s

GPT-2 small (124M: 12 layers, width 768) is lmlab's `gpt2-base` preset; `gpt2-small` there is a
6-layer model. Every contender trains on the same token ids, made once and already on the
device (no host copy or sync inside a timed step), with bf16 autocast over fp32 weights and
AdamW. nanoGPT is read from the model.py at $NANOGPT (the file or its folder); without it its
baseline is left out with a note. The file also holds one optimizer step of Muon against fused
AdamW for GPT-2 small (benchmarks/gpu_optim.py), and for lmlab's compiled steps the graph
breaks and graphs compiled after the first step (torch._dynamo's counters). Each row holds,
for every contender, its device time per step by kind of work (products, attention, compiled
element-wise code, optimizer, copies and casts; benchmarks/gpu_profile.py), and lmlab's top
10 kernels: where lmlab's step differs from a baseline's, read side by side.

    bash benchmarks/gpu_check.sh OUT_DIR            # on the GPU: well under 8 minutes on an H100
    python benchmarks/gpu_check.py OUT_DIR --device cpu --tiny   # the same path in seconds
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from gpu_optim import optimizer_steps
from gpu_pretrain import pretrain_defaults
from gpu_profile import step_profile
from record import machine, write_results
from train_speed import (
    SHAPES,
    Shape,
    floor_step_fn,
    hf_inputs,
    hf_model,
    lmlab_parts,
    nanogpt_model,
)

from lmlab.kernels.compile_counts import compile_counts, reset_compile_counts
from lmlab.kernels.linear_cross_entropy import whole_logits_fit
from lmlab.model.flops import objective_flops_per_token
from lmlab.train.flops import device_peak_flops

TINY = Shape("tiny", 512, 32, 2)


@dataclass(frozen=True)
class Row:
    name: str
    objective: str
    shape: str  # a key of train_speed.SHAPES
    compiled: bool
    # lmlab's loss with the whole logits and a plain cross-entropy as a second lmlab contender,
    # where the default takes the chunked one: whether it should be the default there too
    whole_logits_variant: bool = False


WHOLE_LOGITS = "lmlab whole logits"
PRODUCTS_ALONE = "products alone"
ROWS = (Row("gpt2-small clm bf16 eager", "clm", "gpt2-124m", False, whole_logits_variant=True),
        Row("gpt2-small clm bf16 compiled", "clm", "gpt2-124m", True),
        Row("bert-base mlm bf16 compiled", "mlm", "bert-base", True))
BATCHES = 4  # distinct batches each contender cycles through (MLM's masked count varies)


@dataclass
class Contender:
    name: str
    step: Callable[[], None]  # one training step, queued on the device


def token_batches(shape: Shape) -> list[torch.Tensor]:
    """BATCHES (B, T + 1) blocks of ordinary token ids, the same for every contender."""
    generator = torch.Generator().manual_seed(0)
    return [torch.randint(107, shape.vocab, (shape.batch, shape.seq + 1), generator=generator)
            for _ in range(BATCHES)]


def training_step(loss_of: Callable, batches: list, optimizer, device) -> Callable[[], None]:
    """A step over the next of `batches`: bf16 autocast forward, backward, optimizer step."""
    cycle = itertools.cycle(batches)

    def step() -> None:
        with torch.autocast(device.type, torch.bfloat16):
            loss = loss_of(next(cycle))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def lmlab_contender(row: Row, shape: Shape, tokens: list, device, name: str = "lmlab",
                    one_graph: bool | None = None) -> tuple[Contender, tuple]:
    parts = lmlab_parts(row.objective, row.compiled, shape, device, one_graph)
    _, objective = parts.counted
    generator = torch.Generator().manual_seed(1)
    batches = [objective.make_batch(t[:, :-1], generator).to(device) for t in tokens]
    step = training_step(lambda batch: parts.compute_loss(batch).mean(), batches,
                         parts.optimizer, device)
    return Contender(name, step), parts.counted


def hf_contender(row: Row, shape: Shape, tokens: list, device) -> Contender:
    model, collator = hf_model(row.objective, shape)
    model.to(device)
    forward = torch.compile(model) if row.compiled else model
    batches = [{k: v.to(device) for k, v in hf_inputs(t[:, :-1], collator).items()}
               for t in tokens]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
    return Contender("hf", training_step(lambda inputs: forward(**inputs).loss, batches,
                                         optimizer, device))


def nanogpt_contender(row: Row, shape: Shape, tokens: list, device) -> Contender:
    model = nanogpt_model(nanogpt_file(), shape).to(device)
    optimizer = model.configure_optimizers(0.1, 1e-4, (0.9, 0.95), device.type)
    forward = torch.compile(model) if row.compiled else model
    # inputs and targets made on the device once: nanoGPT's loop copies each batch without
    # waiting (pinned, non-blocking), so no step here waits on the host either
    batches = [(t[:, :-1].to(device), t[:, 1:].contiguous().to(device)) for t in tokens]
    return Contender("nanogpt", training_step(lambda xy: forward(*xy)[1], batches, optimizer,
                                              device))


def nanogpt_file() -> Path | None:
    """$NANOGPT's model.py (the variable may name the file or its folder), if there."""
    given = os.environ.get("NANOGPT")
    if not given:
        return None
    path = Path(given)
    path = path / "model.py" if path.is_dir() else path
    return path if path.is_file() else None


def synchronize(device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def warm(contender: Contender, steps: int, device) -> dict:
    """Run `steps` unmeasured steps (compiling, if compiled); returns the graph breaks and the
    graphs compiled in the first step and after it."""
    reset_compile_counts()
    contender.step()
    synchronize(device)
    first = compile_counts()
    for _ in range(steps - 1):
        contender.step()
    synchronize(device)
    later = compile_counts().since(first)
    return {"graphs_first_step": first.graphs, "graph_breaks": first.graph_breaks +
            later.graph_breaks, "recompiles_after_first_step": later.graphs}


def ms_per_step(contender: Contender, steps: int, device) -> float:
    start = synchronize(device)
    for _ in range(steps):
        contender.step()
    return (synchronize(device) - start) / steps * 1000


def contenders(row: Row, shape: Shape, device, notes: list[str]):
    """(lmlab's contender, its (model config, objective), those it is timed against) of `row`:
    the baselines, lmlab's whole-logits variant where the row asks for it, and in a compiled
    row its matrix products alone."""
    tokens = token_batches(shape)
    lmlab, counted = lmlab_contender(row, shape, tokens, device)
    baselines = [hf_contender(row, shape, tokens, device)]
    if row.whole_logits_variant:
        baselines.append(lmlab_contender(row, shape, tokens, device, WHOLE_LOGITS, True)[0])
        if not whole_logits_fit(shape.batch * shape.seq, shape.vocab, device):
            notes.append(f"{row.name}: {WHOLE_LOGITS} ran chunked (the logits would take over "
                         "half the free memory)")
    if row.objective == "clm":
        if nanogpt_file() is None:
            notes.append(f"{row.name}: no nanoGPT baseline (NANOGPT names no model.py)")
        else:
            baselines.append(nanogpt_contender(row, shape, tokens, device))
    if row.compiled:
        baselines.append(products_alone(row, shape, device))
    return lmlab, counted, baselines


def products_alone(row: Row, shape: Shape, device) -> Contender:
    """lmlab's step's matrix products alone, in bf16 on random matrices (train_speed's floor):
    the pace nothing doing this work beats on this device, whatever its kernels."""
    step, _ = floor_step_fn(row.objective, False, shape, device)
    return Contender(PRODUCTS_ALONE, lambda: step("bf16"))


def measure_row(row: Row, shape: Shape, args, device, peak: float, notes: list[str]) -> dict:
    """The row's figures: lmlab's median step against each baseline's, interleaved."""
    lmlab, (cfg, objective), baselines = contenders(row, shape, device, notes)
    counts = warm(lmlab, args.warmup, device)
    for baseline in baselines:
        warm(baseline, args.warmup, device)
    times: dict[str, list[float]] = {c.name: [] for c in (lmlab, *baselines)}
    for _ in range(args.repeats):  # interleaved: a change of load hits every contender
        for contender in (lmlab, *baselines):
            times[contender.name].append(ms_per_step(contender, args.steps, device))
    median = {name: statistics.median(values) for name, values in times.items()}
    tokens_per_s = shape.batch * shape.seq / median["lmlab"] * 1000
    flops = objective_flops_per_token(cfg, shape.seq, objective, shape.batch)
    result = {"name": row.name, "ms_per_step": median["lmlab"], "tokens_per_s": tokens_per_s,
              "mfu": tokens_per_s * flops / peak,
              # > 1: lmlab's step is that many times as fast as the baseline's
              "vs_nanogpt": median["nanogpt"] / median["lmlab"] if "nanogpt" in median else None,
              "vs_hf": median["hf"] / median["lmlab"], "repeats": args.repeats,
              "ms_per_step_each": times, "seq_len": shape.seq, "batch_size": shape.batch}
    if PRODUCTS_ALONE in median:  # 1: lmlab's step as fast as its matrix products alone
        result["of_products_alone_pace"] = median[PRODUCTS_ALONE] / median["lmlab"]
    if WHOLE_LOGITS in median:  # > 1: the whole-logits loss makes lmlab's step faster
        result["whole_logits_vs_default"] = median["lmlab"] / median[WHOLE_LOGITS]
    if row.compiled:
        result["compile"] = counts
    profiles = {c.name: step_profile(c.step, device) for c in (lmlab, *baselines)}
    if not profiles["lmlab"]["top_kernels"]:
        notes.append(f"{row.name}: the profiler recorded no kernels (is CUPTI available?)")
    result["ms_per_step_by_kind"] = {name: p["ms_per_step_by_kind"]
                                     for name, p in profiles.items()}
    result["top_kernels"] = profiles["lmlab"]["top_kernels"]
    return result


def device_facts(device: torch.device) -> tuple[str, float]:
    """The device's name and its dense bf16 peak (a GPU's datasheet figure, lmlab.train.flops;
    a CPU's measured)."""
    name = (torch.cuda.get_device_name(device) if device.type == "cuda"
            else machine()["cpu"])
    return name, device_peak_flops(device, torch.bfloat16)


def checkout_commit() -> str | None:
    """The commit of the checkout measured, where it is a git checkout."""
    import subprocess

    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).resolve().parent, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--tiny", action="store_true",
                        default=os.environ.get("GPU_CHECK_TINY") == "1",
                        help="tiny models and batches, to test the check itself on a CPU")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per repeat")
    parser.add_argument("--warmup", type=int, default=6, help="unmeasured steps first")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--pretrain-seconds", type=float, default=60.0)
    args = parser.parse_args()
    device = torch.device(args.device)
    started = time.perf_counter()
    name, peak = device_facts(device)
    results = {"device": name, "torch": torch.__version__, "commit": checkout_commit(),
               "peak_bf16_tflops": round(peak / 1e12, 1), "tiny": args.tiny,
               "machine": machine(gpu=name if device.type == "cuda" else None,
                                  cpus_used=torch.get_num_threads()),
               "rows": [], "notes": []}
    out = args.out_dir / "gpu_check.json"
    for row in ROWS:
        shape = TINY if args.tiny else SHAPES[row.shape]
        results["rows"].append(measure_row(row, shape, args, device, peak, results["notes"]))
        report(results["rows"][-1], started)
        write_results(out, results)  # after each row: a check cut short still says something
        if device.type == "cuda":
            torch.cuda.empty_cache()
    shape = TINY if args.tiny else SHAPES["gpt2-124m"]
    results["optimizer"] = optimizer_steps(shape, device, args.steps, args.repeats, peak)
    print(f"[{time.perf_counter() - started:5.0f} s] optimizer " + json.dumps(
        {k: v for k, v in results["optimizer"].items() if k != "ms_per_step_each"}), flush=True)
    results["rows"].append(pretrain_defaults(args.tiny, args.pretrain_seconds, device,
                                             results["notes"]))
    report(results["rows"][-1], started)
    results["seconds"] = time.perf_counter() - started
    write_results(out, results)
    print(f"wrote {out}", flush=True)


def report(row: dict, started: float) -> None:
    print(f"[{time.perf_counter() - started:5.0f} s] " + json.dumps(
        {k: v for k, v in row.items()
         if k not in ("top_kernels", "ms_per_step_each", "ms_per_step_by_kind")}), flush=True)
    by_kind = row.get("ms_per_step_by_kind", {})
    for baseline, theirs in by_kind.items():
        if baseline != "lmlab":
            print(f"        lmlab - {baseline}, ms a step: " + ", ".join(
                f"{kind} {by_kind['lmlab'].get(kind, 0.0) - theirs.get(kind, 0.0):+.2f}"
                for kind in sorted(set(by_kind["lmlab"]) | set(theirs))), flush=True)


if __name__ == "__main__":
    sys.exit(main())
