"""A comparison's report: comparison.json (config, data and code hashes, the machine's CPU,
ledger, table, verdicts, crossovers, pairs with no common measure, the classification probes'
bag-of-words floors), the PNGs of lmlab.compare.figures and report.html, one self-contained
page with the PNGs inlined and no outside address."""

from __future__ import annotations

import base64
import hashlib
import html
import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import numpy as np

from lmlab.atomic import hash_file, write_text_atomic
from lmlab.compare.analysis import Analysis, ArmScore
from lmlab.compare.design import BUDGET_UNITS, CONTROL, CompareConfig
from lmlab.compare.figures import plot_curves, plot_differences, plot_phenomena, plot_probes
from lmlab.compare.floors import Floors
from lmlab.compare.layout import RECORD, REPORT
from lmlab.compare.measures import MINIMAL_PAIRS, minimal_pair_groups
from lmlab.kernels.machine import cpu_name
from lmlab.version import __version__

PNGS = ("curves.png", "differences.png", "phenomena.png", "probes.png")


def file_digest(paths: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in sorted(paths):
        digest.update(path.name.encode())
        hash_file(digest, path)
    return digest.hexdigest()


def provenance(data: Path) -> dict:
    """SHA-256 of the dataset's files and of lmlab's source, so a report names what it ran, and
    the machine it ran on (the ledger's seconds are this machine's)."""
    import torch

    source = Path(__file__).resolve().parents[1]
    machine = {"cpu": cpu_name()}
    if torch.cuda.is_available():
        machine["gpu"] = torch.cuda.get_device_name()
    return {"data": {"path": str(data),
                     "sha256": file_digest([p for p in data.iterdir() if p.is_file()])},
            "code": {"version": __version__,
                     "sha256": file_digest(list(source.rglob("*.py")))},
            "machine": machine}


def write_report(cfg: CompareConfig, analysis: Analysis, data: Path, out: Path,
                 floors: Floors | None = None, warnings: Sequence[str] = ()) -> dict:
    """comparison.json, the plots and the page; `warnings`: the sub-runs' own, one line
    each, naming the run."""
    floors = floors or Floors()
    record = {"config": _config_dict(cfg), **provenance(data),
              "ledger": analysis.ledger, "table": [asdict(r) for r in analysis.rows],
              "verdicts": [v.to_dict() for v in analysis.verdicts],
              "crossovers": [asdict(c) for c in analysis.crossovers],
              "no_common_measure": analysis.apart, "run_warnings": list(warnings),
              **floors.to_dict()}
    if cfg.pairs:
        record["phenomena"] = _phenomena(cfg, analysis)
    write_text_atomic(out / RECORD, json.dumps(record, indent=2))
    plot_curves(cfg, analysis, out / "curves.png", floors.values())
    if analysis.verdicts:
        plot_differences(analysis, out / "differences.png")
    if cfg.pairs:
        plot_phenomena(record["phenomena"], out / "phenomena.png")
    if cfg.probes:
        plot_probes(cfg, analysis, out / "probes.png", floors.values())
    write_text_atomic(out / REPORT, _page(cfg, analysis, out, record["machine"]["cpu"], floors,
                                          warnings))
    return record


def _config_dict(cfg: CompareConfig) -> dict:
    found = asdict(cfg)
    found["probes"] = [asdict(p) for p in cfg.probes]
    return found


def _phenomena(cfg: CompareConfig, analysis: Analysis) -> dict:
    """Minimal-pair accuracy per phenomenon and objective at the full budget, over seeds."""
    _, groups = minimal_pair_groups(cfg.pairs)
    groups = np.array(groups)
    full = max(cfg.fractions)
    table = {}
    for objective in cfg.objectives:
        correct = analysis.scores[MINIMAL_PAIRS, objective, full].mean(axis=(0, 1))
        table[objective] = {g: float(correct[groups == g].mean()) for g in sorted(set(groups))}
    return table


def _inline(path: Path) -> str:
    if not path.is_file():
        return ""
    encoded = base64.b64encode(path.read_bytes()).decode()
    return f'<img alt="{path.stem}" src="data:image/png;base64,{encoded}">'


def _spread(row: ArmScore) -> str:
    """The standard deviation over seeds; one seed has none."""
    return f"{row.seed_std:.2g}" if len(row.seed_means) > 1 else "— (one seed)"


def _table(header: list[str], rows: list[list]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>"
                   for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _verdicts(analysis: Analysis) -> str:
    """The verdict table, and a sentence for each pair that shares no measure, so an empty
    table never stands without its reason."""
    against = [v for v in analysis.verdicts if v.against_control]
    between = [v for v in analysis.verdicts if not v.against_control]
    control = (f"<h3>Each adaptation against {CONTROL}, the run as it came</h3>" + _table(
        ["measure", "adaptation", "effect", "verdict"],
        [[v.verdict.measure, v.a, v.effect, v.text] for v in against])) if against else ""
    table = _table(["measure", "A", "B", "verdict"],
                   [[v.verdict.measure, v.a, v.b, v.text] for v in between])
    return (control + (("<h3>Between adaptations</h3>" if against else "") + table
                       if between else "")
            + "".join(f"<p>{html.escape(line)}.</p>" for line in analysis.apart))


def _floors(cfg: CompareConfig, analysis: Analysis, floors: Floors) -> str:
    """Each classification probe's bag-of-words floor beside every objective's score at the
    full budget, with how to read them; or why the floors are missing."""
    if floors.left_out:
        return f"<h2>Bag-of-words floors</h2><p>Left out: {html.escape(floors.left_out)}.</p>"
    if not floors.by_measure:
        return ""
    full = max(cfg.fractions)
    means = {(r.measure, r.objective): r.mean for r in analysis.rows if r.fraction == full}
    table = _table(["probe measure", "split", "bag-of-words floor", *cfg.objectives],
                   [[measure, floor["split"], f"{floor['value']:.4g}",
                     *(f"{means[measure, o]:.4g}" if (measure, o) in means else ""
                       for o in cfg.objectives)]
                    for measure, floor in floors.by_measure.items()])
    return ("<h2>Bag-of-words floors</h2><p>Logistic regression on the tf-idf of word 1-2-grams, "
            "fitted on each probe's training rows and scored on its scored split with the same "
            "metric (no pre-training at all). A fine-tuned score at or below its floor means "
            "the model learned less from the task than word counts give; a verdict between "
            "two objectives both below it compares two failures.</p>" + table)


def _page(cfg: CompareConfig, analysis: Analysis, out: Path, cpu: str,
          floors: Floors | None = None, warnings: Sequence[str] = ()) -> str:
    full = max(cfg.fractions)
    scores = _table(["measure", "objective", "budget", "FLOPs", "mean", "sd over seeds"],
                    [[r.measure, r.objective, f"{r.fraction:g}", f"{r.flops:.3g}",
                      f"{r.mean:.4g}", _spread(r)] for r in analysis.rows])
    ledger = _table(["objective", "budget", "seed", "steps", "tokens", "FLOPs",
                     "supervised predictions", "seconds"],
                    [[e["objective"], f"{e['fraction']:g}", e["seed"], e["steps"], e["tokens"],
                      f"{e['flops']:.3g}", f"{e['predictions']:.3g}", f"{e['seconds']:.0f}"]
                     for e in analysis.ledger])
    crossings = "".join(
        f"<li>{html.escape(c.measure)}: {html.escape(c.before)} ahead below about "
        f"{c.flops:.3g} FLOPs, {html.escape(c.b if c.before == c.a else c.a)} above</li>"
        for c in analysis.crossovers) or "<li>none between the budgets run</li>"
    pictures = "".join(_inline(out / name) for name in PNGS)
    warned = ("<h2>Runs that warned</h2><ul>" + "".join(
        f"<li>{html.escape(line)}</li>" for line in warnings) + "</ul>") if warnings else ""
    start = cfg.model if cfg.init is None else f"from {cfg.init}"
    title = f"{' vs '.join(cfg.objectives)}: {start}, equal {cfg.match}"
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 70em; color: #222; }}
table {{ border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }}
td, th {{ border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; }}
img {{ max-width: 100%; display: block; margin: 1em 0; }}
</style></head><body>
<h1>{html.escape(title)}</h1>
<p>{cfg.seeds} pre-training seed(s) per objective, paired across objectives; budget
{html.escape(str(cfg.budget))} {BUDGET_UNITS[cfg.match]} at fractions
{", ".join(f"{f:g}" for f in sorted(cfg.fractions))}. Verdicts at the full budget ({full:g}):
a paired hierarchical bootstrap over pre-training seeds, fine-tuning seeds and test items, 95%
intervals, Holm-adjusted across every measure and pair. No side is named where the interval
covers zero. Seconds in the ledger are this machine's; its CPU: {html.escape(cpu)}.</p>
<h2>Verdicts</h2>{_verdicts(analysis)}
{warned}
<h2>Where one overtakes another</h2><ul>{crossings}</ul>
{_floors(cfg, analysis, floors or Floors())}
<h2>Plots</h2>{pictures}
<h2>Scores</h2>{scores}
<h2>Ledger</h2>{ledger}
</body></html>
"""
