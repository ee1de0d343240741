"""How `lmlab pretrain --init` should continue trained weights: optimizer and rate, decided
by measurement as the recipe's other defaults are.

    python benchmarks/init_recipe.py [--seconds 60] [--seeds 5] [--base-minutes 3]
        [--candidates adamw "adamw lr 1e-4" "lr 1e-4"] [--shared ../shared/data]

A base model (`modern-mini`, causal LM) is pre-trained on the built-in corpus with AdamW at
1e-3 and cosine decay, as most released weights were trained (not with Muon). It is then
continued on other text, the shared corpora (Brown and the State of the Union addresses,
prepared with the base's tokenizer), for --seconds a run: `--init`'s defaults as they are
(the baseline) and each candidate, round after round with a new seed (the data order), so
machine noise hits them alike, as `time_to_quality.py search` runs its rounds. Each run is
scored as that search scores (held-out bits per byte on the first 65k validation tokens): on
the new text (what continuing is for) as `bpb`, and on the base's own validation text (what
it forgot) as `base_bpb`. `recipe_intervals.py` judges both, paired by seed.

Writes benchmarks/results/init_recipe.json, the machine named.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from record import ROOT, machine, write_results
from time_to_quality import RESULTS, THREADS, Recipe, lmlab, score_run, summarise, train_and_score

BASE = ("--model", "modern-mini", "--optimizer", "adamw", "--lr", "1e-3",
        "--schedule", "cosine")
CANDIDATES = {
    "adamw": Recipe(("--optimizer", "adamw")),
    "lr 1e-4": Recipe(("--lr", "1e-4")),
    "adamw lr 1e-4": Recipe(("--optimizer", "adamw", "--lr", "1e-4")),
}


def base_model(work: Path, minutes: float) -> tuple[Path, Path]:
    """The base run and the dataset it learned from (the built-in corpus)."""
    from lmlab.data.preparation.entry import builtin_dataset_dir

    base = work / "base"
    if not (base / "config.json").is_file():
        lmlab("pretrain", "--objective", "clm", "--minutes", minutes, "--seed", 0,
              "--out", base, "--overwrite", *BASE)
    return base, builtin_dataset_dir()


def new_text(shared: Path, base: Path, work: Path) -> Path:
    data = work / "data"
    if not (data / "meta.json").is_file():
        lmlab("prepare", *sorted((shared / "corpora").glob("*.jsonl")), "--tokenizer", base,
              "--out", data)
    return data


def continued(recipe: Recipe, data: Path, base_data: Path, seconds: float, seed: int,
              out: Path) -> dict:
    """A continued run scored on the new text and on the base's own text."""
    result = train_and_score(recipe, "clm", data, seconds, seed, out)
    if "base_bpb" not in result:
        result["base_bpb"] = score_run(out, "clm", base_data)
        (out / "time_to_quality.json").write_text(json.dumps(result))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--base-minutes", type=float, default=3.0)
    parser.add_argument("--candidates", nargs="*", choices=sorted(CANDIDATES),
                        default=["adamw", "adamw lr 1e-4"])
    parser.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--work", type=Path, default=Path("/tmp/lmlab-init-recipe"))
    parser.add_argument("--out", type=Path, default=RESULTS / "init_recipe.json")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    base, base_data = base_model(args.work, args.base_minutes)
    data = new_text(args.shared, base, args.work)
    baseline = Recipe(("--init", str(base)))
    recipes = {"baseline": baseline,
               **{name: baseline.merged(CANDIDATES[name]) for name in args.candidates}}
    results: dict[str, list] = {name: [] for name in recipes}
    for seed in range(args.seeds):
        for name, recipe in recipes.items():
            run = args.work / "runs" / f"{name}-{seed}".replace(" ", "_")
            result = continued(recipe, data, base_data, args.seconds, seed, run)
            results[name].append(result)
            print(f"round {seed}  {name:16s} {result['bpb']:.4f} bpb new, "
                  f"{result['base_bpb']:.4f} base  {result['steps']} steps", flush=True)
    write_results(args.out, {
        "machine": machine(threads=int(THREADS)), "objective": "clm",
        "seconds_per_run": args.seconds, "seeds": args.seeds,
        "base": {"recipe": list(BASE), "minutes": args.base_minutes,
                 "data": "the built-in corpus"},
        "baseline": "--init's defaults (--optimizer auto = Muon, --lr 1e-3, wsd, 5% warm-up)",
        "scores": {"bpb": "held-out bits per byte on the new text (Brown + State of the Union)",
                   "base_bpb": "held-out bits per byte on the base's own validation text"},
        "recipes": {name: recipe.command() for name, recipe in recipes.items()},
        "table": summarise(results), "runs": results}, args.work)


if __name__ == "__main__":
    main()
