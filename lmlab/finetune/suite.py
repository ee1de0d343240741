"""A suite of tasks fine-tuned with one set of settings and reported as cramming (Geiping &
Goldstein 2023) and MosaicBERT (Portes et al. 2023) report GLUE: every task trains with the
same hyperparameters for several seeds; per task the median of the seeds' scores, since one
unlucky seed of a small task moves a mean (Dodge et al. 2020), with their range and the
bag-of-words floor beside it; and the average of the medians over tasks.

Each task is an ordinary `lmlab finetune --seeds N` run in OUT/NAME; OUT/suite.json and
OUT/suite.md gather them.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path

from lmlab.atomic import write_text_atomic
from lmlab.config.settings_file import read_settings
from lmlab.finetune.entry import finetune
from lmlab.finetune.results import read_results
from lmlab.finetune.seeds import seed_configs
from lmlab.tasks.bow_floor import require_scikit_learn
from lmlab.tasks.finetune_config import FinetuneConfig
from lmlab.tasks.named import CONFIG_SUFFIXES, NamedTask
from lmlab.tasks.traits import TASKS

SUMMARY = "suite.json"
TABLE = "suite.md"
SEEDS = 5  # cramming's median is over 5 seeds
DEFAULT_OUT = "runs/suite"
# What differs between tasks: each task's entry or its config file gives these.
TASK_FIELDS = ("task", "train", "validation", "test", "text_column", "pair_column",
               "label_column", "train_where", "validation_where", "test_where")


def read_suite(entries: Sequence[str]) -> list[NamedTask]:
    """The tasks of --suite entries: each NAME=TASK:TRAIN:VALIDATION[:TEST] or NAME=CONFIG.yaml,
    or a suite file (YAML or TOML) mapping each NAME to the same TASK:... or CONFIG.yaml."""
    tasks = []
    for entry in entries:
        if "=" not in entry and Path(entry).suffix in CONFIG_SUFFIXES:
            tasks += _read_suite_file(Path(entry))
        else:
            tasks.append(NamedTask.read(entry, "--suite"))
    names = [task.name for task in tasks]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ValueError(f"--suite names {', '.join(twice)} more than once; each task needs a "
                         "name of its own")
    return tasks


def _read_suite_file(path: Path) -> list[NamedTask]:
    entries = read_settings(path, "suite file")
    if set(entries) & set(TASK_FIELDS):
        raise ValueError(f"{path}: a fine-tuning config, not a suite file; name the task: "
                         f"--suite NAME={path}")
    for name, entry in entries.items():
        if not isinstance(entry, str):
            raise ValueError(f"{path}: {name} must be TASK:TRAIN:VALIDATION[:TEST] or "
                             f"CONFIG.yaml, not a {type(entry).__name__}")
    return [NamedTask.read(f"{name}={entry}", f"{path}:") for name, entry in entries.items()]


def suite_configs(tasks: Sequence[NamedTask], shared: Mapping) -> list[FinetuneConfig]:
    """Each task's config: its own files and columns, then the `shared` settings, with --seeds
    5 unless given, the bag-of-words floor where the task has one unless --baseline none, and
    its run in OUT/NAME. Every config is checked here, before any task trains."""
    given = sorted(set(shared) & set(TASK_FIELDS))
    if given:
        raise ValueError(f"--{given[0].replace('_', '-')} is one task's: with --suite, give it "
                         "in that task's entry or config file (NAME=CONFIG.yaml)")
    out = Path(shared.get("out") or DEFAULT_OUT)
    configs = []
    for task in tasks:
        floor = shared.get("baseline", "bow") if TASKS[task.task].bag_of_words_floor else "none"
        settings = {**shared, "seeds": shared.get("seeds", SEEDS), "baseline": floor,
                    "out": str(out / task.name)}
        try:
            configs.append(task.finetune_config(**settings))
        except ValueError as error:
            raise ValueError(f"--suite {task.name}: {error}") from None
    if any(cfg.baseline != "none" for cfg in configs):
        require_scikit_learn("the bag-of-words floor (leave it out with --baseline none)")
    return configs


def run_suite(source: str | Path, tasks: Sequence[NamedTask], shared: Mapping) -> dict:
    """Fine-tune the run at `source` on every task with the `shared` settings; write and print
    the summary. Returns it."""
    configs = suite_configs(tasks, shared)
    for cfg in configs:
        finetune(source, cfg)
    out = Path(shared.get("out") or DEFAULT_OUT)
    summary = {"run": str(source), "settings": dict(shared), "seeds": configs[0].seeds,
               **summarise_tasks([_task_summary(cfg) for cfg in configs])}
    write_text_atomic(out / SUMMARY, json.dumps(summary, indent=2))
    table = format_table(summary)
    write_text_atomic(out / TABLE, table)
    print(table, end="")
    return summary


def _task_summary(cfg: FinetuneConfig) -> dict:
    """The main metric of the task run in `cfg.out` (OUT/NAME) on its scored split (test, else
    validation) over the seeds."""
    out = Path(cfg.out)
    runs = [Path(c.out) for c in seed_configs(cfg, out)] if cfg.seeds > 1 else [out]
    results = [read_results(run) for run in runs]
    metric = results[0]["main_metric"]
    split = "test" if all("test" in result for result in results) else "validation"
    scores = [result[split][metric] for result in results]
    floor = results[0].get("baseline")
    return {"name": out.name, "task": cfg.task, "metric": metric, "split": split,
            "scores": scores, "median": statistics.median(scores), "min": min(scores),
            "max": max(scores), "floor": None if floor is None else floor[split][metric]}


def summarise_tasks(tasks: list[dict]) -> dict:
    """The tasks, and the average of their medians: over every task, and over those with a
    floor beside the floor's average, where some task has none."""
    summary = {"tasks": tasks, "average": _average(tasks)}
    floored = [task for task in tasks if task["floor"] is not None]
    if floored and len(floored) < len(tasks):
        summary["average_with_floor"] = _average(floored)
    return summary


def _average(tasks: list[dict]) -> dict:
    found = {"tasks": [task["name"] for task in tasks],
             "median": statistics.fmean(task["median"] for task in tasks)}
    if all(task["floor"] is not None for task in tasks):
        found["floor"] = statistics.fmean(task["floor"] for task in tasks)
    return found


def format_table(summary: dict) -> str:
    """The summary as a Markdown table: a row per task, then the averages."""
    lines = [f"{summary['run']}: median over {summary['seeds']} seeds, one set of settings",
             "", "| task | metric | split | median | min–max | bag-of-words floor |",
             "|---|---|---|---:|---:|---:|"]
    for task in summary["tasks"]:
        lines.append(f"| {task['name']} ({task['task']}) | {task['metric']} | {task['split']} "
                     f"| {task['median']:.4f} | {task['min']:.4f}–{task['max']:.4f} "
                     f"| {_number(task['floor'])} |")
    averages = [(f"average of {len(summary['tasks'])}", summary["average"])]
    if "average_with_floor" in summary:
        found = summary["average_with_floor"]
        averages.append((f"average of the {len(found['tasks'])} with a floor", found))
    for label, found in averages:
        lines.append(f"| {label} | | | {found['median']:.4f} | "
                     f"| {_number(found.get('floor'))} |")
    return "\n".join(lines) + "\n"


def _number(value: float | None) -> str:
    return "–" if value is None else f"{value:.4f}"
