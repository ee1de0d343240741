"""Replaced-token detection under lmlab's settings against ELECTRA's (`--rtd-recipe electra`),
from random weights, for the same steps on the built-in corpus at paired seeds (seed i of
both arms reads the same data in the same order).

    python benchmarks/rtd_recipe.py [--steps 50] [--batch-size 16] [--seeds 3] [--items 16]
        [--model modernbert-mini] [--probe-rows 0] [--probe-seeds 2]

The measure is the discriminator's held-out loss over its base rate: its BCE a token minus the
entropy of the share of tokens its generator replaced (the loss of knowing how many are
replaced and not which; 0 = nothing learned past that, negative = learned), on each of the
first --items validation micro-batches the runs validate on (the same masks for both arms), so
that lmlab compare's paired bootstrap (lmlab.compare.stats) resamples seeds and items; beside
it the generator's held-out loss. With --probe-rows N each run is also fine-tuned on SST-2's
first N training rows once per --probe-seeds (adaptation_defaults.py's probe: one epoch, the
checkpoint chosen on a seeded selection split of other training rows) and scored on SST-2's
dev set, which chose nothing: accuracy, paired over pre-training seeds, probe seeds and items.
The measures are Holm-adjusted together. Steps, not minutes, so that a shared machine's load
changes the time and not the result.

Writes benchmarks/results/rtd_recipe[_TAG].json, the machine named.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch
from adaptation_defaults import probe, probe_args
from record import machine, write_results

RESULTS = Path(__file__).parent / "results"
ARMS = ("lmlab", "electra")  # --rtd-recipe; the first is the baseline
MEASURES = ("discriminator_over_base_rate", "generator_loss")  # nats a token, lower is better
PROBE = "sst2_accuracy"  # higher is better


def trained(recipe: str, seed: int, args: argparse.Namespace) -> Path:
    from lmlab.cli import main as lmlab

    # named by every setting the run depends on, so a search with other settings trains anew
    out = args.work / f"{recipe}-{args.model}-{args.steps}x{args.batch_size}-seed{seed}"
    if not (out / "checkpoints").is_dir():
        code = lmlab(["pretrain", "--objective", "rtd", "--rtd-recipe", recipe, "--model",
                      args.model, "--batch-size", str(args.batch_size), "--steps",
                      str(args.steps), "--seed", str(seed), "--eval-every", str(args.steps),
                      "--out", str(out), "--overwrite"])
        if code:
            raise SystemExit(f"pre-training {out.name} failed")
    return out


def item_scores(out: Path, items: int) -> dict[str, np.ndarray]:
    """Each measure on each of the first `items` validation micro-batches of the run."""
    import lmlab
    from lmlab.config.training import TrainConfig
    from lmlab.data.loader import BlockBatches
    from lmlab.data.preparation.entry import open_or_prepare
    from lmlab.objectives.rtd import base_rate_entropy
    from lmlab.train.distributed import Env
    from lmlab.train.objective_plan import plan_objective
    from lmlab.train.validation import validate

    run, dataset = lmlab.load(out, "last"), open_or_prepare(None)
    cfg = TrainConfig(**{k: v for k, v in run.config.train.items()
                         if k in ("objective", "seq_len", "batch_size")})
    plan = plan_objective(run.objective, cfg, run.special)
    blocks = BlockBatches(dataset.validation, cfg.seq_len, cfg.batch_size, plan.packing,
                          plan.pad_id, dataset.special.sep, 0)
    objective, env = run.objective.for_evaluation(), Env(0, 1, 0, torch.device("cpu"))
    scores = {measure: [] for measure in MEASURES}
    for index in range(items):
        found = validate(run.model, {"rtd": objective}, [blocks.batch(index).tokens],
                         dataset.bytes_per_token, env)
        scores["discriminator_over_base_rate"].append(
            found["rtd/discriminator_loss"] / objective.weight
            - base_rate_entropy(found["rtd/replaced_fraction"]))
        scores["generator_loss"].append(found["rtd/generator_loss"])
    return {measure: np.asarray(values) for measure, values in scores.items()}


def held_out(out: Path) -> dict:
    """The run's own last validation: its discriminator against the base rate."""
    from lmlab.objectives.rtd import of_base_rate

    record = [json.loads(line) for line in (out / "metrics.jsonl").open()
              if '"eval"' in line][-1]
    weight = json.loads((out / "config.json").read_text())["train"][
        "objective_options"]["rtd_weight"]
    return {"step": record["step"], "of_base_rate": round(of_base_rate(record, weight), 4),
            "replaced_fraction": round(record["rtd/replaced_fraction"], 4),
            "generator_accuracy": round(record["rtd/generator_accuracy"], 4)}


def verdicts(scores: dict[str, dict[str, np.ndarray]]) -> list[dict]:
    """electra minus lmlab on each measure, paired over seeds and items, Holm-adjusted over the
    measures."""
    from lmlab.compare.stats import holm, paired_bootstrap

    measures = list(scores["electra"])
    found = [paired_bootstrap(scores["electra"][measure], scores["lmlab"][measure])
             for measure in measures]
    adjusted = holm([difference.p_value for difference in found])
    return [{"measure": measure, "electra_minus_lmlab": round(d.estimate, 4),
             "low": round(d.low, 4), "high": round(d.high, 4), "holm_p": round(p, 4),
             "electra": round(d.mean_a, 4), "lmlab": round(d.mean_b, 4),
             "says": ("no detectable difference" if p >= 0.05 else
                      "electra lower" if d.estimate < 0 else "electra higher")}
            for measure, d, p in zip(measures, found, adjusted, strict=True)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--model", default="modernbert-mini")  # what --model auto gives rtd
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--items", type=int, default=16)
    parser.add_argument("--probe-rows", type=int, default=0, help="0: no probe")
    parser.add_argument("--probe-seeds", type=int, default=2)
    parser.add_argument("--tag", help="results file rtd_recipe_TAG.json")
    parser.add_argument("--work", type=Path, default=Path("/tmp/lmlab-rtd-recipe"))
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    sst2 = probe_args("sst2", args.work, args.probe_rows) if args.probe_rows else None
    runs, scores = [], {arm: {} for arm in ARMS}
    for seed in range(args.seeds):
        for recipe in ARMS:
            out = trained(recipe, seed, args)
            items = {measure: values[None] for measure, values
                     in item_scores(out, args.items).items()}  # (1, items)
            if args.probe_rows:
                items[PROBE] = probe(out, sst2, args.probe_seeds,
                                     out / f"probe-{args.probe_rows}-rows")
            for measure, values in items.items():
                scores[recipe].setdefault(measure, []).append(values)
            runs.append({"recipe": recipe, "seed": seed, **held_out(out),
                         **{measure: round(float(values.mean()), 4)
                            for measure, values in items.items()}})
            print(json.dumps(runs[-1]), flush=True)
    stacked = {arm: {measure: np.stack(values) for measure, values in by.items()}
               for arm, by in scores.items()}  # (seeds, probe seeds or 1, items)
    name = f"rtd_recipe_{args.tag}.json" if args.tag else "rtd_recipe.json"
    write_results(RESULTS / name, {"machine": machine(threads=torch.get_num_threads()),
                                   "settings": vars(args), "runs": runs,
                                   "verdicts": verdicts(stacked)}, args.work)


if __name__ == "__main__":
    main()
