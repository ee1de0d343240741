"""Time to quality: held-out bits per byte after a fixed wall-clock budget on 2 CPU threads.

    python benchmarks/time_to_quality.py search [--objective clm] [--seconds 90] [--seeds 3]
        [--first-seed 0]
        [--candidates NAME ...] [--combine NAME ...] [--on-defaults]

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

Results: benchmarks/results/time_to_quality_<objective>.json, the machine named. Against nanoGPT:
benchmarks/versus_nanogpt.py.
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
SHARED_DATA = ROOT.parent / "shared" / "data"
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
    search_parser.add_argument("--shared", type=Path, default=SHARED_DATA)
    search_parser.add_argument("--work", type=Path, default=Path("/tmp/lmlab-time-to-quality"))
    search(parser.parse_args())


if __name__ == "__main__":
    main()
