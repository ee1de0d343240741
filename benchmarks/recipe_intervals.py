"""The recipe search's choices judged by the statistics `lmlab compare` uses: for each change
in a `time_to_quality.py search` results file, the paired difference to that file's baseline
with its 95% interval (lmlab.compare.stats.paired_bootstrap), and Holm's adjustment across the
changes one search judged together (lmlab.compare.stats.holm), so a default rests on its
interval.

    python benchmarks/recipe_intervals.py [FILE ...] [--out FILE]

Each run of a search is scored once (held-out bits per byte, a mean over 65k tokens), and a
change's seed i shares its data order with the baseline's seed i. So the unit resampled is the
pre-training seed: the K paired differences enter the bootstrap as its K units (scores of shape
(1, 1, K)), and the interval has K - 1 degrees of freedom. With 3 seeds the t quantile is 4.30:
only a change that beats the baseline in every seed by much more than the seeds' spread has an
interval that excludes zero. A change is reported as bits per byte against its baseline
(negative is better). Writes benchmarks/results/recipe_intervals.json.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from record import ROOT, machine, write_results

from lmlab.compare.stats import holm, paired_bootstrap, verdict

RESULTS = ROOT / "benchmarks" / "results"
SEARCHES = ["time_to_quality_clm.json", "time_to_quality_mlm.json",
            "time_to_quality_clm_combined.json", "time_to_quality_mlm_combined.json",
            "time_to_quality_clm_embedding_lr.json", "time_to_quality_mlm_embedding_lr.json",
            "time_to_quality_clm_5_seeds.json", "time_to_quality_clm_defaults.json",
            "time_to_quality_mlm_defaults.json", "init_recipe.json"]


def paired_scores(runs: dict, name: str, score: str = "bpb") -> tuple[np.ndarray, np.ndarray,
                                                                     list[int]]:
    """(change, baseline) bits per byte (the runs' `score`) of the seeds both ran, each shaped
    (1, 1, K)."""
    baseline = {run["seed"]: run[score] for run in runs["baseline"]}
    change = {run["seed"]: run[score] for run in runs[name]}
    seeds = sorted(baseline.keys() & change.keys())
    shaped = lambda by_seed: np.array([by_seed[s] for s in seeds]).reshape(1, 1, -1)  # noqa: E731
    return shaped(change), shaped(baseline), seeds


def judged(files: list[Path]) -> list[dict]:
    """One row per change of every file, its interval and its p adjusted by Holm across the
    changes of its file (one search, judged together)."""
    return [row for path in files for row in _judged_search(path)]


def _judged_search(path: Path) -> list[dict]:
    """A search scored more than one way (its "scores") is judged once per score."""
    search = json.loads(path.read_text(encoding="utf-8"))
    rows = []
    for score in search.get("scores", {"bpb": ""}):
        for name in search["runs"]:
            if name == "baseline":
                continue
            change, baseline, seeds = paired_scores(search["runs"], name, score)
            # lower bits are better: the advantage is baseline - change
            difference = paired_bootstrap(change, baseline, higher_is_better=False)
            rows.append({"file": path.name, "objective": search["objective"], "score": score,
                         "change": name, "seeds": seeds, "difference": difference})
    adjusted = holm([row["difference"].p_value for row in rows])
    for row, p in zip(rows, adjusted, strict=True):
        found = verdict(row["change"], row["difference"], p, names=(row["change"], "baseline"))
        d = row.pop("difference")
        # as bits per byte against the baseline: negative is better, the interval likewise
        row.update(bpb_change=-d.estimate, low=-d.high, high=-d.low, p_value=d.p_value,
                   holm_p=p, degrees_of_freedom=d.degrees_of_freedom,
                   baseline_bpb=d.mean_b, change_bpb=d.mean_a,
                   excludes_zero=not d.low <= 0 <= d.high, verdict=found.says)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path,
                        default=[RESULTS / name for name in SEARCHES])
    parser.add_argument("--out", type=Path, default=RESULTS / "recipe_intervals.json")
    args = parser.parse_args()
    rows = judged(args.files)
    for row in rows:
        print(f"{row['objective']} {row['score']:8s} {row['change']:48s} {row['bpb_change']:+.3f} "
              f"[{row['low']:+.3f}, {row['high']:+.3f}]  Holm p {row['holm_p']:.2f}  "
              f"{row['verdict']}")
    write_results(args.out, {
        "machine": machine(note="no measurement here: statistics of the files named"),
        "method": "lmlab.compare.stats.paired_bootstrap over pre-training seeds (scores "
                  "(1, 1, K)), 2000 resamples, 95% t interval; Holm across the rows of each file",
        "files": [path.name for path in args.files], "rows": rows})


if __name__ == "__main__":
    main()
