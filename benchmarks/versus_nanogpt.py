"""lmlab's default causal recipe against nanoGPT, in wall-clock time to the same held-out quality
on 2 CPU threads.

    python benchmarks/versus_nanogpt.py run --nanogpt DIR [--seconds 72 96 120] [--seeds 3]
        [--nanogpt-minutes 6] [--nanogpt-lrs 6e-4 1.2e-3 2.4e-3 4.8e-3] [--model gpt2-mini]

DIR holds nanoGPT's `model.py`. Its model trains with its `configure_optimizers` (AdamW at
nanoGPT's settings: betas 0.9/0.95, weight decay 0.1, gradient clipping 1.0) on lmlab's blocks,
shape and batch, with nanoGPT's warm-up and cosine decay to a tenth of the peak over the steps
that fit --nanogpt-minutes (re-estimated from the pace after every step, as lmlab keeps to a
deadline), once at each of --nanogpt-lrs (a learning-rate search at the size, as
lmlab's recipe had; 6e-4 is the rate of nanoGPT's 124M model), then at its best rate with each
further seed. Its target is the median of those runs' final held-out quality. lmlab's default
CLM recipe (`lmlab pretrain --objective clm` with only the data, the time and the seed given)
then trains for each budget in --seconds at every seed, as a speedrun does: each run's schedule
ends with its own budget. Both sides' final weights are scored on the same validation blocks
(time_to_quality.py's scoring). lmlab's time to quality is the shortest budget whose median run
reaches the target, read linearly between the budgets on either side of it (when the shortest
budget already reaches it, that budget is an upper bound, and the results file says so). Every
run also validates up to 12 times spread over its time; the curves are plotted.

Results: benchmarks/results/time_to_quality_nanogpt_MODEL_Nseeds.{json,png}, the machine named.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from record import machine, write_results
from time_to_quality import (
    EVAL_MICRO_BATCHES,
    MICRO_BATCH,
    RESULTS,
    SEQ_LEN,
    SHARED_DATA,
    THREADS,
    Recipe,
    bits_per_byte,
    prepared,
    train_and_score,
    validation_blocks,
)


def nanogpt_train(args) -> None:
    """nanoGPT's model and optimizer on lmlab's blocks for `--minutes`; writes its curve."""
    import importlib.util

    import torch

    from lmlab.config.budget import DEADLINE_VALIDATIONS
    from lmlab.config.presets import preset
    from lmlab.data.dataset import open_dataset
    from lmlab.data.loader import BlockBatches
    from lmlab.train.deadline import Deadline, deadline_eval_batches
    from lmlab.train.schedule import Schedule

    torch.manual_seed(args.seed)
    spec = importlib.util.spec_from_file_location("nanogpt_model", args.nanogpt / "model.py")
    nanogpt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(nanogpt)
    dataset = open_dataset(args.data)
    special = dataset.special
    cfg = preset(args.model, special.vocab_size, SEQ_LEN)
    model = nanogpt.GPT(nanogpt.GPTConfig(
        block_size=SEQ_LEN, vocab_size=special.vocab_size, n_layer=cfg.n_layers,
        n_head=cfg.n_heads, n_embd=cfg.d_model, dropout=0.0, bias=True))
    optimizer = model.configure_optimizers(0.1, args.lr, (0.9, 0.95), "cpu")
    train = BlockBatches(dataset.train, SEQ_LEN, MICRO_BATCH, "concatenate",
                         special.padding_id, special.sep, args.seed)
    deadline = Deadline(args.minutes, validations=DEADLINE_VALIDATIONS)
    wrapped = NanoGPTAsLM(model)
    # As lmlab keeps to a deadline: the step count is re-estimated after every step from the
    # pace so far, the warm-up (5%, at most 1000 steps) fixed by the first estimate.
    schedule = Schedule("cosine", 1000, 50, 0.1)  # until the pace is known
    curve, step, total, eval_blocks = [], 0, None, None
    while total is None or step < total:
        for group in optimizer.param_groups:
            group["lr"] = args.lr * schedule(step)
        tokens = train.batch(step).tokens  # (B, T)
        _, loss = model(tokens[:, :-1], tokens[:, 1:].contiguous())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        total = deadline.total_steps(step)
        warmup = schedule.warmup_steps if step > 1 else min(round(0.05 * total), 1000)
        schedule = Schedule("cosine", max(total, 1), min(warmup, total), 0.1)
        if deadline.validation_due() or step >= total:
            started = time.perf_counter()
            if eval_blocks is None:  # as many as lmlab's validation reads in such a run
                eval_blocks, bytes_per_token = validation_blocks(
                    args.data, deadline_eval_batches(total, EVAL_MICRO_BATCHES), special)
            bpb = bits_per_byte(wrapped, "clm", special, eval_blocks, bytes_per_token)
            deadline.validated(started)
            curve.append({"step": step, "seconds": time.perf_counter() - deadline.start,
                          "bpb": bpb})
    final_blocks, bytes_per_token = validation_blocks(args.data, EVAL_MICRO_BATCHES, special)
    args.out.write_text(json.dumps({
        "curve": curve, "steps": step,
        "final_bpb": bits_per_byte(wrapped, "clm", special, final_blocks, bytes_per_token)}))


class NanoGPTAsLM:
    """nanoGPT's GPT answering as an lmlab model does to validation: {"lm": logits}."""

    def __init__(self, model) -> None:
        self.model, self.training = model, True

    def __call__(self, input_ids, **_):
        logits, _ = self.model(input_ids, input_ids)  # targets make it return every position
        return {"lm": logits}

    def eval(self):
        self.model.eval()

    def train(self, mode: bool = True):
        self.model.train(mode)


def lmlab_curve(run: Path) -> list[dict]:
    records = [json.loads(line) for line in (run / "metrics.jsonl").open()]
    return [{"step": r["step"], "seconds": r["seconds"], "bpb": r["clm/clm_bpb"]}
            for r in records if r["kind"] == "eval"]


def time_to_reach(curve: list[dict], target: float) -> float | None:
    """Seconds at which the curve first reaches `target` bpb (linear between points)."""
    previous = None
    for point in curve:
        if point["bpb"] <= target:
            if previous is None:
                return point["seconds"]
            share = (previous["bpb"] - target) / (previous["bpb"] - point["bpb"])
            return previous["seconds"] + share * (point["seconds"] - previous["seconds"])
        previous = point
    return None


def versus_nanogpt(args) -> None:
    data = prepared(args.shared, args.work)
    # named by the settings the runs depend on, so that other settings train anew
    runs = args.work / f"versus-{args.model or 'auto'}-{args.nanogpt_minutes:g}min"
    runs.mkdir(parents=True, exist_ok=True)
    searched = {lr: nanogpt_run(args, data, runs / f"nanogpt-lr{lr:g}-0.json", lr, 0)
                for lr in args.nanogpt_lrs}
    best_lr = min(searched, key=lambda lr: searched[lr]["final_bpb"])
    theirs = [searched[best_lr]] + [
        nanogpt_run(args, data, runs / f"nanogpt-lr{best_lr:g}-{seed}.json", best_lr, seed)
        for seed in range(1, args.seeds)]
    target = statistics.median(run["final_bpb"] for run in theirs)
    model = Recipe(("--model", args.model) if args.model else ())
    ours = {}
    for seconds in args.seconds:
        ours[seconds] = []
        for seed in range(args.seeds):
            run = runs / f"lmlab-{seconds:g}s-{seed}"
            result = train_and_score(model, "clm", data, seconds, seed, run)
            ours[seconds].append({**result, "curve": lmlab_curve(run)})
            print(f"lmlab {seconds:g} s, seed {seed}: {result['bpb']:.4f} bpb "
                  f"(nanoGPT's target {target:.4f})", flush=True)
    finals = {seconds: spread([run["bpb"] for run in results]) for seconds, results in ours.items()}
    medians = [{"seconds": s, "bpb": finals[s]["median"]} for s in sorted(finals)]
    reached = time_to_reach(medians, target)
    crossing = ("beyond the longest budget" if reached is None else
                "at or before the shortest budget" if medians[0]["bpb"] <= target else
                "between budgets, read linearly")
    nanogpt_seconds = args.nanogpt_minutes * 60
    ratio = None if reached is None else nanogpt_seconds / reached
    print(f"nanoGPT {args.nanogpt_minutes:g} min at its best rate {best_lr:g}: median "
          f"{target:.4f} bpb over {args.seeds} seeds; lmlab's median reached it at {reached} s "
          f"(time ratio {ratio})")
    stem = f"time_to_quality_nanogpt_{args.model or 'auto'}_{args.seeds}seeds"
    plot(ours, searched, theirs, best_lr, target, RESULTS / f"{stem}.png", args)
    write_results(RESULTS / f"{stem}.json", {
        "machine": machine(threads=int(THREADS)), "model": args.model or "auto",
        "lmlab_model_config": json.loads(
            (runs / f"lmlab-{min(ours):g}s-0" / "config.json").read_text())["model"],
        "seeds": args.seeds, "nanogpt_minutes": args.nanogpt_minutes,
        "nanogpt_search": {f"{lr:g}": run["final_bpb"] for lr, run in searched.items()},
        "nanogpt_lr": best_lr, "nanogpt": theirs,
        "nanogpt_final": spread([run["final_bpb"] for run in theirs]),
        "lmlab": {f"{seconds:g}": results for seconds, results in ours.items()},
        "lmlab_final": {f"{s:g}": final for s, final in finals.items()},
        "lmlab_seconds_to_nanogpt_median": reached,
        "crossing": crossing,
        "time_ratio": ratio}, args.work)


def spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def nanogpt_run(args, data: Path, out: Path, lr: float, seed: int) -> dict:
    """One nanoGPT run at `lr`, in its own process with lmlab's threads: its curve (kept, so
    the comparison started again reuses the runs it finished)."""
    if not out.exists():
        subprocess.run([sys.executable, __file__, "nanogpt-train", "--nanogpt", args.nanogpt,
                        "--data", data, "--minutes", str(args.nanogpt_minutes), "--out", out,
                        "--model", args.model or "gpt2-mini", "--lr", str(lr),
                        "--seed", str(seed)],
                       check=True, env={**os.environ, "OMP_NUM_THREADS": THREADS})
    return json.loads(out.read_text())


def plot(ours: dict, searched: dict, theirs: list, best_lr: float, target: float, out: Path,
         args) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(8, 5))
    for lr, run in searched.items():
        if lr != best_lr:
            draw_curve(axis, run["curve"], "grey", 0.35, f"nanoGPT, lr {lr:g} (seed 0)")
    for seed, run in enumerate(theirs):
        label = f"nanoGPT, lr {best_lr:g} (its best), {len(theirs)} seeds"
        draw_curve(axis, run["curve"], "black", 0.8, label if seed == 0 else None)
    colours = plt.get_cmap("viridis")([i / max(len(ours), 1) for i in range(len(ours))])
    for colour, (seconds, results) in zip(colours, sorted(ours.items()), strict=True):
        for seed, run in enumerate(results):
            draw_curve(axis, run["curve"], colour, 0.6,
                       f"lmlab defaults, {seconds:g} s runs" if seed == 0 else None)
        axis.scatter([seconds] * len(results), [run["bpb"] for run in results], color=colour,
                     marker="*", s=90, zorder=3)
    axis.axhline(target, color="black", linestyle="--", linewidth=1,
                 label=f"nanoGPT's median after {args.nanogpt_minutes:g} min ({target:.3f})")
    axis.set_xscale("log")
    ticks = sorted({*ours, 30.0, 120.0, 240.0, args.nanogpt_minutes * 60})
    axis.set_xticks(ticks, [f"{tick:g}" for tick in ticks])
    axis.minorticks_off()
    axis.set_xlabel("wall-clock seconds (2 CPU threads; log scale)")
    axis.set_ylabel("held-out bits per byte (★ a run's final score)")
    axis.set_title(f"Brown + State of the Union, {(args.model or 'mini').split('-')[-1]} size "
                   "for both, same blocks", fontsize=11)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(out, dpi=120)
    plt.close(figure)


def draw_curve(axis, curve: list[dict], colour, alpha: float, label: str | None) -> None:
    axis.plot([p["seconds"] for p in curve], [p["bpb"] for p in curve], color=colour,
              alpha=alpha, label=label, linewidth=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    versus = commands.add_parser("run")
    versus.add_argument("--nanogpt", type=Path, required=True, help="a nanoGPT checkout")
    versus.add_argument("--seconds", type=float, nargs="+", default=[72.0, 96.0, 120.0],
                        help="lmlab's budgets, a run each at every seed")
    versus.add_argument("--seeds", type=int, default=3, help="runs a side at each setting")
    versus.add_argument("--nanogpt-minutes", type=float, default=6.0)
    versus.add_argument("--nanogpt-lrs", type=float, nargs="+",
                        default=[6e-4, 1.2e-3, 2.4e-3, 4.8e-3],
                        help="nanoGPT's peak learning rates, one run each at seed 0; the best "
                             "runs again at the other seeds")
    versus.add_argument("--model", default=None, help="a preset; none = lmlab's --model auto")
    versus.add_argument("--shared", type=Path, default=SHARED_DATA)
    versus.add_argument("--work", type=Path, default=Path("/tmp/lmlab-versus-nanogpt"))
    inner = commands.add_parser("nanogpt-train")  # one nanoGPT run, in its own process
    inner.add_argument("--nanogpt", type=Path, required=True)
    inner.add_argument("--data", type=Path, required=True)
    inner.add_argument("--minutes", type=float, required=True)
    inner.add_argument("--out", type=Path, required=True)
    inner.add_argument("--model", default="gpt2-mini")
    inner.add_argument("--seed", type=int, default=0)
    inner.add_argument("--lr", type=float, default=6e-4)
    args = parser.parse_args()
    {"run": versus_nanogpt, "nanogpt-train": nanogpt_train}[args.command](args)


if __name__ == "__main__":
    main()
