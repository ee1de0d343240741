"""Several seeds of one fine-tuning, summarised as mean ± standard deviation: small-data
fine-tuning varies a lot from seed to seed (Dodge et al. 2020), so one run says little."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np

from lmlab.atomic import write_text_atomic
from lmlab.finetune.results import read_results
from lmlab.tasks.bow_floor import floor_line
from lmlab.tasks.finetune_config import FinetuneConfig

SUMMARY = "seeds.json"


def summarise(results: list[dict]) -> dict:
    """{split: {metric: {"mean", "std", "values"}}} over the seeds' results (sample std)."""
    summary = {}
    for split in ("validation", "test"):
        runs = [result[split] for result in results if split in result]
        if not runs:
            continue
        summary[split] = {}
        for metric in runs[0]:
            values = [run[metric] for run in runs]
            std = float(np.std(values, ddof=1)) if len(values) > 1 else 0.0
            summary[split][metric] = {"mean": float(np.mean(values)), "std": std,
                                      "values": values}
    return summary


def seed_configs(cfg: FinetuneConfig, out: Path) -> list[FinetuneConfig]:
    """One single-seed config per seed: OUT/seed-N with seed cfg.seed + N."""
    return [replace(cfg, seeds=1, seed=cfg.seed + index, out=str(out / f"seed-{index}"))
            for index in range(cfg.seeds)]


def write_seed_summary(out: Path, cfg: FinetuneConfig, runs: list[Path]) -> None:
    """OUT/seeds.json over the seeds' runs (with the bag-of-words floor, the same for every
    seed, where one was fitted), and its main metric printed."""
    results = [read_results(run) for run in runs]
    summary = {"task": cfg.task, "seeds": [cfg.seed + i for i in range(cfg.seeds)],
               "main_metric": results[0]["main_metric"], **summarise(results)}
    if "baseline" in results[0]:
        summary["baseline"] = results[0]["baseline"]
    write_text_atomic(out / SUMMARY, json.dumps(summary, indent=2))
    main = summary["main_metric"]
    for split in ("validation", "test"):
        if split in summary:
            found = summary[split][main]
            print(f"{split} {main}: {found['mean']:.4f} ± {found['std']:.4f} over "
                  f"{cfg.seeds} seeds")
    if "baseline" in summary:
        means = {split: {main: summary[split][main]["mean"]}
                 for split in ("validation", "test") if split in summary}
        print(floor_line(summary["baseline"], means))
