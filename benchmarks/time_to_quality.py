"""Time to quality: held-out bits per byte after a fixed wall-clock budget on 2 CPU threads.

    python benchmarks/time_to_quality.py search [--objective clm] [--seconds 90] [--seeds 3]
        [--first-seed 0]
        [--candidates NAME ...] [--combine NAME ...] [--on-defaults]
    python benchmarks/time_to_quality.py nanogpt --nanogpt DIR [--minutes 10]
        [--nanogpt-minutes 20] [--nanogpt-lrs 6e-4 1.2e-3 2.4e-3 4.8e-3] [--model gpt2-mini]

`search` trains each candidate recipe (one change to the baseline, or with --combine several)
with `lmlab pretrain --minutes` on the shared corpora (Brown and the State of the Union
addresses, prepared once with an 8,192-token vocabulary), round after round: every round runs
the baseline and each candidate once, with a new seed, so machine noise hits them alike. Each
run's final weights are scored in this process on the first 16 validation micro-batches (the
blocks lmlab validates on, 65k tokens), as lmlab's validation scores them: bits per byte, so
tokenizers could differ; masked objectives under the fixed 15% validation mask. The baseline
is a plain recipe spelled out, or with --on-defaults lmlab's defaults as they are now; against
the defaults, the candidates are their simpler options (AdamW, cosine decay, one rate for
the embeddings, a tied head, the BERT family for masked LM), so a default shows what taking
it away costs.

`nanogpt` trains lmlab's default CLM recipe (`lmlab pretrain --objective clm` with only the
data and the time given) and nanoGPT's own `model.py` with its `configure_optimizers` (AdamW
at nanoGPT's settings: betas 0.9/0.95, weight decay 0.1, gradient clipping 1.0) on the same
blocks, shape and batch, warm-up and cosine decay over the steps that fit the time (the
schedule lmlab uses), once at each of --nanogpt-lrs: a learning-rate search at the size, as
lmlab's recipe had (6e-4, nanoGPT's default, is the rate of its 124M model). Every run
validates 12 times spread over its time on the same blocks; the curves (bits per byte against
seconds) are plotted, and the time lmlab took to reach the best nanoGPT run's final quality is
read off them.

Results: benchmarks/results/time_to_quality_<objective>.json (search) and
time_to_quality_nanogpt_MODEL_AvBmin.{json,png} (A minutes of lmlab against B of nanoGPT),
the machine named.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from record import ROOT, machine, write_results

RESULTS = Path(__file__).parent / "results"
THREADS = "2"
EVAL_MICRO_BATCHES = 16
MICRO_BATCH = 32  # lmlab's default batch, one micro-batch a step on one process
SEQ_LEN = 128


@dataclass(frozen=True)
class Recipe:
    """What `lmlab pretrain` is told beyond the data, time and seed."""

    args: tuple[str, ...] = ()
    overrides: dict = field(default_factory=dict)

    def merged(self, other: Recipe) -> Recipe:
        return Recipe(self.args + other.args, {**self.overrides, **other.overrides})

    def command(self) -> list[str]:
        extra = ["--model-overrides", json.dumps(self.overrides)] if self.overrides else []
        return [*self.args, *extra]


# The baseline is spelled out so that the table means the same after the defaults change.
BASELINES = {
    "clm": Recipe(("--model", "gpt2-mini", "--optimizer", "adamw", "--lr", "1e-3",
                   "--schedule", "cosine")),
    "mlm": Recipe(("--model", "bert-mini", "--optimizer", "adamw", "--lr", "1e-3",
                   "--schedule", "cosine", "--mlm-rate", "0.15")),
}
# One change each, against the baseline.
CANDIDATES = {
    "modern family": Recipe(("--model", "modern-mini")),
    "muon": Recipe(("--optimizer", "muon")),
    "qk-norm": Recipe(overrides={"qk_norm": True}),
    "relu2": Recipe(overrides={"activation": "relu2"}),
    "zero-init projections": Recipe(overrides={"zero_init_projections": True}),
    "untied head": Recipe(overrides={"tie_embeddings": False}),
    "logit soft-cap 15": Recipe(overrides={"logit_softcap": 15.0}),
    "unet skips": Recipe(overrides={"unet_skips": True}),
    "value embeddings": Recipe(overrides={"value_embeddings": 2}),  # every layer of a mini
    "bigram hash": Recipe(overrides={"bigram_hash": 16384}),  # twice the data's vocabulary
    # modded-nanogpt warms Muon's momentum up over 300 of its ~1,750 steps; a run here takes
    # 70-100 steps, so about the same share. With Muon, which the plain baseline lacks: compare
    # it with "muon" there, or run it --on-defaults for causal LM (Muon by default).
    "muon momentum warm-up": Recipe(("--optimizer", "muon",
                                     "--muon-momentum-warmup-steps", "15")),
    "untie late": Recipe(("--untie-at", "0.67")),  # two thirds into the run
    "seq-len warm-up": Recipe(("--seq-len-warmup-steps", "20")),  # a quarter of a run here
    "batch-size warm-up": Recipe(("--batch-size-warmup-steps", "20")),
    "wsd schedule": Recipe(("--schedule", "wsd")),
    "lr 2e-3": Recipe(("--lr", "2e-3")),
    "embedding lr x10": Recipe(("--embedding-lr-scale", "10")),
    "embedding lr x30": Recipe(("--embedding-lr-scale", "30")),
    "mask 30%": Recipe(("--mlm-rate", "0.3")),
    "mask 30%→15%": Recipe(("--mlm-rate-start", "0.3", "--mlm-rate", "0.15")),
    "mask-rate schedule": Recipe(("--mlm-rate-schedule", "30,15,5")),  # mmBERT's, in thirds
    # the defaults' simpler options, each against --on-defaults: a default stays only if
    # taking it away costs
    "adamw": Recipe(("--optimizer", "adamw")),
    "cosine schedule": Recipe(("--schedule", "cosine")),
    "embedding lr x1": Recipe(("--embedding-lr-scale", "1")),
    "tied head": Recipe(overrides={"tie_embeddings": True}),
    "bert family": Recipe(("--model", "bert-mini")),
}
MASKED_ONLY = ("mask 30%", "mask 30%→15%", "mask-rate schedule", "bert family")
CAUSAL_ONLY = ("untie late",)  # the masked default (modernbert) ties no head to untie
SIMPLER = ("adamw", "cosine schedule", "embedding lr x1", "tied head", "bert family")


def lmlab(*args) -> None:
    """An lmlab command on THREADS threads; its output is shown only if it fails."""
    done = subprocess.run([sys.executable, "-m", "lmlab", *map(str, args)], cwd=ROOT,
                          env={**os.environ, "OMP_NUM_THREADS": THREADS}, capture_output=True,
                          text=True)
    if done.returncode:
        sys.exit(f"lmlab {' '.join(map(str, args))} failed:\n{done.stderr[-3000:]}")


def prepared(shared: Path, work: Path) -> Path:
    data = work / "data"
    if not (data / "meta.json").exists():
        lmlab("prepare", *sorted((shared / "corpora").glob("*.jsonl")), "--out", data,
              "--vocab-size", 8192)
    return data


# --- scoring --------------------------------------------------------------------------------

def validation_blocks(data: Path, count: int, special):
    """The first `count` validation micro-batches, as lmlab's validation reads them."""
    from lmlab.data.dataset import open_dataset
    from lmlab.data.loader import BlockBatches

    dataset = open_dataset(data)
    batches = BlockBatches(dataset.validation, SEQ_LEN, MICRO_BATCH, "concatenate",
                           special.padding_id, special.sep, 0)
    return [batches.batch(i).tokens for i in range(min(count, batches.batches_per_epoch))], \
        dataset.bytes_per_token


def bits_per_byte(model, objective_name: str, special, blocks, bytes_per_token) -> float:
    import torch

    from lmlab.objectives.registry import build_objective
    from lmlab.train.distributed import Env
    from lmlab.train.validation import validate

    objectives = build_objective(objective_name, special).evaluated_leaves()
    metrics = validate(model, objectives, blocks, bytes_per_token,
                       Env(0, 1, 0, torch.device("cpu")))
    (bpb,) = [v for k, v in metrics.items() if k.endswith("_bpb")]
    return bpb


def score_run(run: Path, objective_name: str, data: Path) -> float:
    from lmlab.runs.run import load_run

    loaded = load_run(run, checkpoint="last")
    blocks, bytes_per_token = validation_blocks(data, EVAL_MICRO_BATCHES, loaded.special)
    return bits_per_byte(loaded.model, objective_name, loaded.special, blocks, bytes_per_token)


def train_and_score(recipe: Recipe, objective: str, data: Path, seconds: float, seed: int,
                    out: Path) -> dict:
    """The run's score, kept beside it: a search started again reuses the runs it finished."""
    kept = out / "time_to_quality.json"
    if kept.exists():
        return json.loads(kept.read_text())
    started = time.perf_counter()
    lmlab("pretrain", "--objective", objective, "--data", data, "--minutes", seconds / 60,
          "--seed", seed, "--out", out, "--overwrite", *recipe.command())
    wall = time.perf_counter() - started
    steps = max(r["step"] for r in map(json.loads, (out / "metrics.jsonl").open()))
    result = {"seed": seed, "bpb": score_run(out, objective, data), "steps": steps,
              "wall_seconds": round(wall, 1)}
    kept.write_text(json.dumps(result))
    return result


# --- the search -----------------------------------------------------------------------------

def search(args) -> None:
    data = prepared(args.shared, args.work)
    names = args.candidates if args.candidates is not None else [
        n for n in CANDIDATES if (n in SIMPLER) == args.on_defaults
        and (args.objective == "mlm" or n not in MASKED_ONLY)
        and (args.objective == "clm" or n not in CAUSAL_ONLY)]
    baseline = Recipe() if args.on_defaults else BASELINES[args.objective]
    recipes = {"baseline": baseline}
    for name in names:
        recipes[name] = baseline.merged(CANDIDATES[name])
    if args.combine:
        combined = baseline
        for name in args.combine:
            combined = combined.merged(CANDIDATES[name])
        recipes[" + ".join(args.combine)] = combined
    results: dict[str, list] = {name: [] for name in recipes}
    for round_ in range(args.first_seed, args.first_seed + args.seeds):
        for name, recipe in recipes.items():
            on = "-defaults" if args.on_defaults else ""
            run = args.work / "runs" / (f"{args.objective}{on}-{args.seconds:g}s-{name}-{round_}"
                                        .replace(" ", "_"))
            result = train_and_score(recipe, args.objective, data, args.seconds, round_, run)
            results[name].append(result)
            print(f"round {round_}  {name:28s} {result['bpb']:.4f} bpb  "
                  f"{result['steps']} steps  {result['wall_seconds']} s", flush=True)
    table = summarise(results)
    for row in table:
        print(f"{row['candidate']:28s} {row['bpb_mean']:.4f} ± {row['bpb_sd']:.4f}  "
              f"({row['vs_baseline']:+.4f} vs baseline)  {row['steps_mean']:.0f} steps")
    write_results(args.out or RESULTS / f"time_to_quality_{args.objective}.json", {
        "machine": machine(threads=int(THREADS)), "objective": args.objective,
        "seconds_per_run": args.seconds, "seeds": args.seeds,
        "baseline": "lmlab's defaults" if args.on_defaults else "the plain recipe",
        "recipes": {name: recipe.command() for name, recipe in recipes.items()},
        "table": table, "runs": results}, args.work)


def summarise(results: dict[str, list]) -> list[dict]:
    base = statistics.mean(r["bpb"] for r in results["baseline"])
    table = []
    for name, runs in results.items():
        scores = [r["bpb"] for r in runs]
        table.append({"candidate": name, "bpb_mean": statistics.mean(scores),
                      "bpb_sd": statistics.stdev(scores) if len(scores) > 1 else 0.0,
                      "vs_baseline": statistics.mean(scores) - base,
                      "steps_mean": statistics.mean(r["steps"] for r in runs),
                      "wall_seconds_mean": statistics.mean(r["wall_seconds"] for r in runs)})
    return table


# --- against nanoGPT ------------------------------------------------------------------------

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


def lmlab_curve(run: Path, data: Path) -> dict:
    records = [json.loads(line) for line in (run / "metrics.jsonl").open()]
    curve = [{"step": r["step"], "seconds": r["seconds"], "bpb": r["clm/clm_bpb"]}
             for r in records if r["kind"] == "eval"]
    return {"curve": curve, "steps": curve[-1]["step"],
            "final_bpb": score_run(run, "clm", data)}


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
    runs = args.work / "versus"
    lmlab_run = runs / "lmlab"
    lmlab("pretrain", "--objective", "clm", "--data", data, "--minutes", args.minutes,
          "--out", lmlab_run, "--overwrite", *(["--model", args.model] if args.model else []))
    ours = lmlab_curve(lmlab_run, data)
    searched = {lr: nanogpt_run(args, data, runs / f"nanogpt-lr{lr:g}.json", lr)
                for lr in args.nanogpt_lrs}
    best_lr = min(searched, key=lambda lr: searched[lr]["final_bpb"])
    theirs = searched[best_lr]
    reached = time_to_reach(ours["curve"], theirs["curve"][-1]["bpb"])
    ratio = None if reached is None else theirs["curve"][-1]["seconds"] / reached
    print(f"lmlab {args.minutes} min: {ours['final_bpb']:.4f} bpb; nanoGPT "
          f"{args.nanogpt_minutes} min at its best rate {best_lr:g}: {theirs['final_bpb']:.4f} "
          f"bpb; lmlab reached it in {reached} s (time ratio {ratio})")
    stem = (f"time_to_quality_nanogpt_{args.model or 'auto'}_"
            f"{args.minutes:g}v{args.nanogpt_minutes:g}min")
    plot(ours, searched, best_lr, RESULTS / f"{stem}.png", args)
    write_results(RESULTS / f"{stem}.json", {
        "machine": machine(threads=int(THREADS)), "model": args.model or "auto",
        "lmlab_model_config": json.loads((lmlab_run / "config.json").read_text())["model"],
        "lmlab_minutes": args.minutes, "nanogpt_minutes": args.nanogpt_minutes,
        "lmlab": ours, "nanogpt_lr": best_lr, "nanogpt": theirs,
        "nanogpt_search": {f"{lr:g}": run["final_bpb"] for lr, run in searched.items()},
        "lmlab_seconds_to_nanogpt_final": reached, "time_ratio": ratio}, args.work)


def nanogpt_run(args, data: Path, out: Path, lr: float) -> dict:
    """One nanoGPT run at `lr`, in its own process with lmlab's threads: its curve."""
    subprocess.run([sys.executable, __file__, "nanogpt-train", "--nanogpt", args.nanogpt,
                    "--data", data, "--minutes", str(args.nanogpt_minutes), "--out", out,
                    "--model", args.model or "gpt2-mini", "--lr", str(lr)],
                   check=True, env={**os.environ, "OMP_NUM_THREADS": THREADS})
    return json.loads(out.read_text())


def plot(ours: dict, searched: dict, best_lr: float, out: Path, args) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 4.5))
    runs = [(f"lmlab default CLM recipe ({args.minutes:g} min)", ours, 1.0)]
    runs += [(f"nanoGPT model.py + AdamW, lr {lr:g}" + (" (best)" if lr == best_lr else ""),
              result, 1.0 if lr == best_lr else 0.35) for lr, result in searched.items()]
    for label, result, alpha in runs:
        axis.plot([p["seconds"] for p in result["curve"]], [p["bpb"] for p in result["curve"]],
                  marker="o", label=label, alpha=alpha)
    axis.set_xlabel("wall-clock seconds (2 CPU threads)")
    axis.set_ylabel("held-out bits per byte")
    axis.set_title(f"Brown + State of the Union, {(args.model or 'mini').split('-')[-1]} size "
                   "for both, same blocks", fontsize=11)
    axis.grid(alpha=0.3)
    axis.legend()
    figure.tight_layout()
    figure.savefig(out, dpi=120)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    search_parser = commands.add_parser("search")
    search_parser.add_argument("--objective", choices=sorted(BASELINES), default="clm")
    search_parser.add_argument("--seconds", type=float, default=90.0)
    search_parser.add_argument("--seeds", type=int, default=3)
    search_parser.add_argument("--first-seed", type=int, default=0,
                               help="seeds run from it: rounds split over processes")
    search_parser.add_argument("--candidates", nargs="*", choices=sorted(CANDIDATES))
    search_parser.add_argument("--combine", nargs="*", choices=sorted(CANDIDATES))
    search_parser.add_argument("--on-defaults", action="store_true",
                               help="the baseline is lmlab's defaults (--model auto and the "
                                    "rest), not the spelled-out plain recipe")
    search_parser.add_argument("--out", type=Path, help="the results file; default "
                               "benchmarks/results/time_to_quality_OBJECTIVE.json")
    versus = commands.add_parser("nanogpt")
    versus.add_argument("--nanogpt", type=Path, required=True, help="a nanoGPT checkout")
    versus.add_argument("--minutes", type=float, default=10.0)
    versus.add_argument("--nanogpt-minutes", type=float, default=20.0)
    versus.add_argument("--nanogpt-lrs", type=float, nargs="+",
                        default=[6e-4, 1.2e-3, 2.4e-3, 4.8e-3],
                        help="nanoGPT's peak learning rates, one run each (its best is quoted)")
    versus.add_argument("--model", default=None, help="a preset; none = lmlab's --model auto")
    inner = commands.add_parser("nanogpt-train")  # one nanoGPT run, in its own process
    inner.add_argument("--nanogpt", type=Path, required=True)
    inner.add_argument("--data", type=Path, required=True)
    inner.add_argument("--minutes", type=float, required=True)
    inner.add_argument("--out", type=Path, required=True)
    inner.add_argument("--model", default="gpt2-mini")
    inner.add_argument("--seed", type=int, default=0)
    inner.add_argument("--lr", type=float, default=6e-4)
    for sub in (search_parser, versus):
        sub.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data")
        sub.add_argument("--work", type=Path, default=Path("/tmp/lmlab-time-to-quality"))
    args = parser.parse_args()
    {"search": search, "nanogpt": versus_nanogpt, "nanogpt-train": nanogpt_train}[
        args.command](args)


if __name__ == "__main__":
    main()
