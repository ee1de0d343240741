"""A comparison's report: comparison.json (config, data and code hashes, ledger, table,
verdicts, crossovers), PNGs (score against FLOPs with seed bands, a forest plot of the paired
differences, a per-phenomenon minimal-pair heatmap, fine-tuning seed spread) and report.html,
one self-contained page with the PNGs inlined and no outside address."""

from __future__ import annotations

import base64
import hashlib
import html
import json
from dataclasses import asdict
from pathlib import Path

import numpy as np

from lmlab.atomic import write_text_atomic
from lmlab.compare.analysis import Analysis
from lmlab.compare.design import BUDGET_UNITS, CompareConfig
from lmlab.compare.layout import RECORD, REPORT
from lmlab.compare.measures import MINIMAL_PAIRS, measure_of, pair_groups
from lmlab.report.plots import pyplot, save_png

PNGS = ("curves.png", "differences.png", "phenomena.png", "probes.png")


def file_digest(paths: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in sorted(paths):
        digest.update(path.name.encode())
        with open(path, "rb") as file:
            for block in iter(lambda: file.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def provenance(data: Path) -> dict:
    """SHA-256 of the dataset's files and of lmlab's source, so a report names what it ran."""
    source = Path(__file__).resolve().parents[1]
    from lmlab.version import __version__

    return {"data": {"path": str(data),
                     "sha256": file_digest([p for p in data.iterdir() if p.is_file()])},
            "code": {"version": __version__,
                     "sha256": file_digest(list(source.rglob("*.py")))}}


def write_report(cfg: CompareConfig, analysis: Analysis, data: Path, out: Path) -> dict:
    record = {"config": _config_dict(cfg), **provenance(data),
              "ledger": analysis.ledger, "table": [asdict(r) for r in analysis.rows],
              "verdicts": [v.to_dict() for v in analysis.verdicts],
              "crossovers": [asdict(c) for c in analysis.crossovers]}
    if cfg.pairs:
        record["phenomena"] = _phenomena(cfg, analysis)
    write_text_atomic(out / RECORD, json.dumps(record, indent=2))
    _plot_curves(cfg, analysis, out / "curves.png")
    _plot_differences(analysis, out / "differences.png")
    if cfg.pairs:
        _plot_phenomena(record["phenomena"], out / "phenomena.png")
    if cfg.probes:
        _plot_probes(cfg, analysis, out / "probes.png")
    write_text_atomic(out / REPORT, _page(cfg, analysis, out))
    return record


def _config_dict(cfg: CompareConfig) -> dict:
    found = asdict(cfg)
    found["probes"] = [asdict(p) for p in cfg.probes]
    return found


def _phenomena(cfg: CompareConfig, analysis: Analysis) -> dict:
    """Minimal-pair accuracy per phenomenon and objective at the full budget, over seeds."""
    _, groups = pair_groups(cfg.pairs)
    groups = np.array(groups)
    full = max(cfg.fractions)
    table = {}
    for objective in cfg.objectives:
        correct = analysis.scores[MINIMAL_PAIRS, objective, full].mean(axis=(0, 1))
        table[objective] = {g: float(correct[groups == g].mean()) for g in sorted(set(groups))}
    return table


def _colours(cfg: CompareConfig) -> dict[str, str]:
    """One colour per objective, the same in every plot."""
    return {objective: f"C{index}" for index, objective in enumerate(cfg.objectives)}


def _plot_curves(cfg: CompareConfig, analysis: Analysis, path: Path) -> None:
    plt = pyplot()
    measures = sorted({r.measure for r in analysis.rows})
    columns = min(3, len(measures))
    lines = -(-len(measures) // columns)
    figure, axes = plt.subplots(lines, columns, figsize=(4.6 * columns, 3.6 * lines),
                                squeeze=False)
    for axis in axes.ravel()[len(measures):]:
        axis.set_visible(False)
    for axis, measure in zip(axes.ravel(), measures, strict=False):
        for objective, colour in _colours(cfg).items():
            rows = sorted((r for r in analysis.rows
                           if r.measure == measure and r.objective == objective),
                          key=lambda r: r.flops)
            if not rows:
                continue
            x = [r.flops for r in rows]
            axis.plot(x, [r.mean for r in rows], marker="o", color=colour, label=objective)
            axis.fill_between(x, [min(r.seed_means) for r in rows],
                              [max(r.seed_means) for r in rows], color=colour, alpha=0.2)
        axis.set_xscale("log")
        axis.set_xlabel("training FLOPs")
        axis.set_title(measure + ("" if measure_of(measure).higher_is_better
                                  else " (lower is better)"), fontsize=9)
        axis.legend(fontsize=7)
    figure.suptitle("score against compute (band: range over pre-training seeds)", fontsize=10)
    figure.tight_layout()
    save_png(figure, path)


def _plot_differences(analysis: Analysis, path: Path) -> None:
    plt = pyplot()
    verdicts = analysis.verdicts
    figure, axis = plt.subplots(figsize=(8, 0.45 * len(verdicts) + 1.5))
    for row, pair in enumerate(verdicts):
        d = pair.verdict.difference
        colour = "grey" if pair.verdict.says.startswith("no") else "tab:blue"
        axis.errorbar(d.estimate, row, xerr=[[d.estimate - d.low], [d.high - d.estimate]],
                      fmt="o", color=colour, capsize=3)
    axis.axvline(0, color="black", linewidth=0.8)
    axis.set_yticks(range(len(verdicts)),
                    [f"{p.verdict.measure}: {p.a} vs {p.b}" for p in verdicts], fontsize=8)
    axis.invert_yaxis()
    axis.set_xlabel("advantage of the first objective, 95% interval (right: first better)",
                    fontsize=8)
    axis.set_title("paired differences at the full budget", fontsize=10)
    figure.tight_layout()
    save_png(figure, path)


def _plot_phenomena(table: dict, path: Path) -> None:
    plt = pyplot()
    objectives = list(table)
    phenomena = list(next(iter(table.values())))
    grid = np.array([[table[o][p] for o in objectives] for p in phenomena])
    figure, axis = plt.subplots(figsize=(1.6 * len(objectives) + 3, 0.3 * len(phenomena) + 1.8))
    image = axis.imshow(grid, cmap="viridis", vmin=0, vmax=1, aspect="auto")
    axis.set_xticks(range(len(objectives)), objectives, fontsize=8)
    axis.set_yticks(range(len(phenomena)), phenomena, fontsize=7)
    figure.colorbar(image, label="minimal-pair accuracy")
    axis.set_title("minimal pairs by phenomenon (full budget, mean over seeds)", fontsize=10)
    figure.tight_layout()
    save_png(figure, path)


def _plot_probes(cfg: CompareConfig, analysis: Analysis, path: Path) -> None:
    plt = pyplot()
    full = max(cfg.fractions)
    measures = sorted({m for m, _, _ in analysis.scores if measure_of(m).kind == "probe"})
    figure, axes = plt.subplots(1, len(measures), figsize=(4 * len(measures), 3.4),
                                squeeze=False)
    for axis, measure in zip(axes[0], measures, strict=True):
        for column, (objective, colour) in enumerate(_colours(cfg).items()):
            runs = analysis.scores[measure, objective, full].mean(axis=2).ravel()
            axis.scatter(np.full(len(runs), column) + np.linspace(-0.15, 0.15, len(runs)), runs,
                         color=colour, alpha=0.7)
        axis.set_xticks(range(len(cfg.objectives)), cfg.objectives, fontsize=8)
        axis.set_title(measure, fontsize=9)
    figure.suptitle("fine-tuning runs (each pre-training seed × fine-tuning seed)", fontsize=10)
    figure.tight_layout()
    save_png(figure, path)


def _inline(path: Path) -> str:
    if not path.is_file():
        return ""
    encoded = base64.b64encode(path.read_bytes()).decode()
    return f'<img alt="{path.stem}" src="data:image/png;base64,{encoded}">'


def _table(header: list[str], rows: list[list]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>"
                   for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _page(cfg: CompareConfig, analysis: Analysis, out: Path) -> str:
    full = max(cfg.fractions)
    verdicts = _table(["measure", "A", "B", "verdict"],
                      [[v.verdict.measure, v.a, v.b, v.verdict.text] for v in analysis.verdicts])
    scores = _table(["measure", "objective", "budget", "FLOPs", "mean", "sd over seeds"],
                    [[r.measure, r.objective, f"{r.fraction:g}", f"{r.flops:.3g}",
                      f"{r.mean:.4g}", f"{r.seed_std:.2g}"] for r in analysis.rows])
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
    title = f"{' vs '.join(cfg.objectives)}: {cfg.model}, equal {cfg.match}"
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
covers zero.</p>
<h2>Verdicts</h2>{verdicts}
<h2>Where one overtakes another</h2><ul>{crossings}</ul>
<h2>Plots</h2>{pictures}
<h2>Scores</h2>{scores}
<h2>Ledger</h2>{ledger}
</body></html>
"""
