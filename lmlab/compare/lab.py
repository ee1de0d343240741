"""`lmlab compare`: pre-train every objective under one budget and design, score each run the
ways its objective allows, and judge every pair with paired statistics.

The comparison directory holds design.json (what was asked), runs/<objective>/budget-F/seed-K
(ordinary run directories, each with its scores.npz), and the report. Running the same
command again reuses every finished sub-run; a different design in the same directory is
refused, naming what changed.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ProcessPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

from tqdm import tqdm

from lmlab.atomic import make_directory, write_text_atomic
from lmlab.compare.analysis import Analysis, analyse
from lmlab.compare.arms import SubRun, sub_runs
from lmlab.compare.cluster import joined_cluster, run_on_ray
from lmlab.compare.design import CONTROL, CompareConfig
from lmlab.compare.floors import probe_floors
from lmlab.compare.layout import DESIGN, REPORT
from lmlab.compare.report import write_report
from lmlab.compare.subrun import complete, finished, read_warnings, starting_point
from lmlab.data.dataset import Dataset
from lmlab.data.preparation.entry import open_or_prepare
from lmlab.objectives.registry import build_objective

# Fields that change no sub-run's training or scoring: a re-run may change them freely.
FREE_FIELDS = ("workers", "out", "report_to", "cluster", "cpus_per_run", "gpus_per_run")


@dataclass
class Comparison:
    out: Path
    analysis: Analysis
    record: dict  # comparison.json

    @property
    def verdicts(self) -> list[dict]:
        return self.record["verdicts"]


def compare(cfg: CompareConfig, progress: bool = True) -> Comparison:
    dataset = open_or_prepare(cfg.data)
    data = str(dataset.path)
    # checks --init's run, every objective and budget before writing
    subs = sub_runs(cfg, dataset, starting_point(cfg, dataset))
    out = Path(cfg.out)
    left = [sub for sub in runs_of(subs) if not finished(sub)]
    with _cluster(cfg, left):  # joined before anything is written: a refusal leaves nothing
        _claim(out, cfg, data)
        print(status_line(runs_of(subs), left))
        floors = probe_floors(cfg.probes)  # before training: a probe file that fails, fails now
        _run_all(left, cfg, data, progress)
    analysis = analyse(cfg, subs)
    warnings = run_warnings(cfg, subs, dataset)
    record = write_report(cfg, analysis, Path(data), out, floors, warnings)
    against = (f"; each adaptation against {CONTROL}, the run as it came, first"
               if CONTROL in cfg.objectives else "")
    print(f"verdicts at the full budget ({max(cfg.fractions):g}){against}:")
    for line in analysis.verdict_lines:
        print(f"  {line}")
    for line in warnings:
        print(f"  warning: {line}")
    full = max(cfg.fractions)
    for line in floors.below({(r.measure, r.objective): r.mean for r in analysis.rows
                              if r.fraction == full}):
        print(f"  warning: {line}")
    if floors.by_measure:
        print("bag-of-words floors (a probe's score below its floor is a warning):")
    for measure, floor in floors.by_measure.items():
        print(f"  {measure}: {floor['value']:.4f} on {floor['split']}")
    print(f"report: {out / REPORT}")
    return Comparison(out, analysis, record)


def run_warnings(cfg: CompareConfig, subs: list[SubRun], dataset: Dataset) -> list[str]:
    """Each sub-run's warnings from its last validation, named by run: a seed that failed
    (an RTD discriminator that learned nothing) pulls its objective's mean down with it."""
    found = []
    for sub in runs_of(subs):
        objectives = build_objective(sub.pretrains_with, dataset.special,
                                     cfg.objective_settings,
                                     dataset.word_starts).evaluated_leaves()
        found += [f"{sub.objective} budget {sub.fraction:g} seed {sub.seed}: {line}"
                  for line in read_warnings(sub, objectives)]
    return found


def runs_of(subs: list[SubRun]) -> list[SubRun]:
    """One sub-run per run directory: the control is one run, read at every budget and seed."""
    first: dict = {}
    for sub in subs:
        first.setdefault(sub.out, sub)
    return list(first.values())


def status_line(subs: list[SubRun], left: list[SubRun]) -> str:
    done = len(subs) - len(left)
    by_objective = {}
    for sub in left:
        by_objective[sub.objective] = by_objective.get(sub.objective, 0) + 1
    todo = ", ".join(f"{objective} {count}" for objective, count in by_objective.items())
    return (f"{len(subs)} pre-training runs: {done} done, {len(left)} to run"
            + (f" ({todo})" if todo else ""))


def _claim(out: Path, cfg: CompareConfig, data: str) -> None:
    """Write design.json, or check that the one there asks for the same comparison."""
    design = {**_design_fields(cfg), "data": data}
    path = out / DESIGN
    if path.is_file():
        before = json.loads(path.read_text())
        changed = sorted(k for k in design.keys() | before.keys()
                         if design.get(k) != before.get(k))
        if changed:
            raise ValueError(f"{out} holds a comparison with other {', '.join(changed)}; "
                             f"use another --out, or the same options to continue it")
        return
    if out.exists() and any(out.iterdir()):
        raise ValueError(f"{out} exists and is not a comparison directory; choose another --out")
    make_directory(out)
    write_text_atomic(path, json.dumps(design, indent=2))


def _design_fields(cfg: CompareConfig) -> dict:
    from dataclasses import asdict

    found = {k: v for k, v in asdict(cfg).items() if k not in FREE_FIELDS}
    return json.loads(json.dumps(found))  # tuples as lists, as read back


def _cluster(cfg: CompareConfig, left: list[SubRun]) -> AbstractContextManager:
    """The Ray cluster joined for the sub-runs `left`, or nothing to join."""
    if cfg.cluster != "ray" or not left:
        return nullcontext()
    return joined_cluster(cfg)


def _run_all(left: list[SubRun], cfg: CompareConfig, data: str, progress: bool) -> None:
    # closed however it ends, so that an error starts a line of its own
    with tqdm(total=len(left), desc="comparison", unit="run", disable=not progress) as bar:
        if cfg.cluster == "ray" and left:
            run_on_ray(left, cfg, data, bar)
        elif cfg.workers == 1 or len(left) <= 1:
            for sub in left:
                bar.set_postfix_str(f"{sub.objective} budget {sub.fraction:g} seed {sub.seed}")
                complete(sub, cfg, data)
                bar.update()
        else:
            threads = max(1, (os.cpu_count() or 1) // cfg.workers)
            with ProcessPoolExecutor(cfg.workers, mp_context=get_context("spawn"),
                                     initializer=_set_threads, initargs=(threads,)) as pool:
                futures = [pool.submit(complete, sub, cfg, data) for sub in left]
                for future in futures:
                    future.result()
                    bar.update()


def _set_threads(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)
