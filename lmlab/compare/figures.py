"""A comparison's PNGs: scores against compute (or, at one budget, each objective's seeds side by
side), a forest plot of the paired differences, a per-phenomenon minimal-pair heatmap and the
fine-tuning runs' spread, with each classification probe's bag-of-words floor as a
horizontal line. Each objective keeps one colour in every plot."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from lmlab.compare.analysis import Analysis, ArmScore
from lmlab.compare.design import BUDGET_UNITS, CompareConfig
from lmlab.compare.measures import measure_of
from lmlab.runs.plots import legend, pyplot, save_png


def colours(cfg: CompareConfig) -> dict[str, str]:
    """One colour per objective, the same in every plot."""
    return {objective: f"C{index}" for index, objective in enumerate(cfg.objectives)}


def floor_line(axis, floor: float | None) -> None:
    """A probe's bag-of-words floor across the panel, in the legend."""
    if floor is None:
        return
    axis.axhline(floor, color="grey", linestyle="--", linewidth=1, label="bag-of-words")
    legend(axis, fontsize=7)


def plot_curves(cfg: CompareConfig, analysis: Analysis, path: Path,
                floors: dict[str, float] | None = None) -> None:
    """One panel per measure: the score against training FLOPs with a band over pre-training
    seeds; with one budget (where every objective sits at about the same FLOPs) each
    objective's seeds as points beside one another instead. `floors`: probe measure → its
    bag-of-words floor, drawn across its panel."""
    plt = pyplot()
    measures = sorted({r.measure for r in analysis.rows})
    columns = min(3, len(measures))
    lines = -(-len(measures) // columns)
    figure, axes = plt.subplots(lines, columns, figsize=(4.6 * columns, 3.6 * lines),
                                squeeze=False)
    for axis in axes.ravel()[len(measures):]:
        axis.set_visible(False)
    one_budget = len(set(cfg.fractions)) == 1
    for axis, measure in zip(axes.ravel(), measures, strict=False):
        rows = {objective: sorted((r for r in analysis.rows
                                   if r.measure == measure and r.objective == objective),
                                  key=lambda r: r.flops) for objective in cfg.objectives}
        rows = {objective: found for objective, found in rows.items() if found}
        (_seed_points if one_budget else _curves)(axis, rows, colours(cfg))
        floor_line(axis, (floors or {}).get(measure))
        axis.ticklabel_format(axis="y", useOffset=False)
        axis.set_title(measure + ("" if measure_of(measure).higher_is_better
                                  else " (lower is better)"), fontsize=9)
    if one_budget:
        (fraction,) = set(cfg.fractions)
        title = (f"scores at one budget, {_short(cfg.amount * fraction)} "
                 f"{BUDGET_UNITS[cfg.match]} a run (dots: pre-training seeds, bar: their mean)")
    else:
        title = "score against compute (band: range over pre-training seeds)"
    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    save_png(figure, path)


def _seed_points(axis, rows: dict[str, list[ArmScore]], colour: dict[str, str]) -> None:
    for column, (objective, (row,)) in enumerate(rows.items()):
        seeds = np.array(row.seed_means)
        spread = np.linspace(-0.12, 0.12, len(seeds)) if len(seeds) > 1 else np.zeros(1)
        axis.scatter(column + spread, seeds, color=colour[objective], alpha=0.7, s=22)
        axis.plot([column - 0.25, column + 0.25], [row.mean] * 2, color=colour[objective],
                  linewidth=2)
    axis.set_xticks(range(len(rows)), list(rows), fontsize=8)
    axis.set_xlim(-0.6, len(rows) - 0.4)


def _curves(axis, rows: dict[str, list[ArmScore]], colour: dict[str, str]) -> None:
    for objective, found in rows.items():
        if not any(r.flops for r in found):  # trained nothing (the control): one level
            axis.axhline(found[0].mean, color=colour[objective], linestyle=":",
                         label=objective)
            continue
        x = [r.flops for r in found]
        axis.plot(x, [r.mean for r in found], marker="o", color=colour[objective],
                  label=objective)
        axis.fill_between(x, [min(r.seed_means) for r in found],
                          [max(r.seed_means) for r in found], color=colour[objective],
                          alpha=0.2)
    flops = [r.flops for found in rows.values() for r in found if r.flops]
    axis.set_xscale("log")
    axis.set_xlim(min(flops) / 1.2, max(flops) * 1.2)
    ticks = budget_ticks(flops)
    axis.set_xticks(ticks, [_short(t) for t in ticks])
    axis.set_xticks([], minor=True)
    axis.set_xlabel("training FLOPs")
    legend(axis, fontsize=7)


def budget_ticks(flops: list[float]) -> list[float]:
    """The FLOPs the runs reached, from the largest down, each kept only where it lies below
    two thirds of the last one kept, so that no two labels collide."""
    ticks: list[float] = []
    for x in sorted(set(flops), reverse=True):
        if not ticks or x < ticks[-1] / 1.5:
            ticks.append(x)
    return ticks[::-1]


def _short(amount: float) -> str:
    """2e12, 5e11, 1.35e12, 40: a plain label with no offset or multiplier."""
    return re.sub(r"e\+?0*", "e", f"{amount:.3g}")


def plot_differences(analysis: Analysis, path: Path) -> None:
    """A forest plot of the paired differences, one panel per measure: each panel's axis is
    in that measure's unit (bits per byte, accuracy, ...), never two units on one axis."""
    plt = pyplot()
    by_measure: dict[str, list] = {}
    for verdict in analysis.verdicts:
        by_measure.setdefault(verdict.verdict.measure, []).append(verdict)
    heights = [0.45 * len(verdicts) + 0.9 for verdicts in by_measure.values()]
    figure, axes = plt.subplots(len(by_measure), 1, figsize=(8, sum(heights) + 0.8),
                                squeeze=False, gridspec_kw={"height_ratios": heights})
    for axis, (measure, verdicts) in zip(axes[:, 0], by_measure.items(), strict=True):
        _forest_panel(axis, measure, verdicts)
    figure.suptitle("paired differences at the full budget, 95% intervals (right: first "
                    "objective better; grey: no side named)", fontsize=10)
    figure.tight_layout()
    save_png(figure, path)


def _forest_panel(axis, measure: str, verdicts: list) -> None:
    """One row per pair of objectives, its difference on `measure` with its interval."""
    for row, verdict in enumerate(verdicts):
        d = verdict.verdict.difference
        colour = "grey" if verdict.says.startswith("no") else "tab:blue"
        axis.errorbar(d.estimate, row, xerr=[[d.estimate - d.low], [d.high - d.estimate]],
                      fmt="o", color=colour, capsize=3)
    axis.axvline(0, color="black", linewidth=0.8)
    axis.set_yticks(range(len(verdicts)), [f"{v.a} vs {v.b}" for v in verdicts], fontsize=8)
    axis.set_ylim(len(verdicts) - 0.5, -0.5)
    axis.set_title(measure, fontsize=9)
    axis.set_xlabel(f"advantage of the first objective in {measure_unit(measure)}", fontsize=8)


def measure_unit(measure: str) -> str:
    """What a measure's differences are counted in: bits per byte for (pseudo) bits per byte,
    a probe's metric for a probe, a share of items otherwise."""
    if "bits per byte" in measure:
        return "bits per byte"
    if measure_of(measure).kind == "probe" and measure.endswith(")"):
        return measure[measure.rindex("(") + 1:-1]
    return "share of items"


def plot_phenomena(table: dict, path: Path) -> None:
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


def plot_probes(cfg: CompareConfig, analysis: Analysis, path: Path,
                floors: dict[str, float] | None = None) -> None:
    plt = pyplot()
    full = max(cfg.fractions)
    measures = sorted({m for m, _, _ in analysis.scores if measure_of(m).kind == "probe"})
    # at least as wide as its title, which a single narrow panel would clip
    figure, axes = plt.subplots(1, len(measures), figsize=(max(6.0, 4 * len(measures)), 3.4),
                                squeeze=False)
    for axis, measure in zip(axes[0], measures, strict=True):
        for column, (objective, colour) in enumerate(colours(cfg).items()):
            runs = analysis.scores[measure, objective, full].mean(axis=2).ravel()
            axis.scatter(np.full(len(runs), column) + np.linspace(-0.15, 0.15, len(runs)), runs,
                         color=colour, alpha=0.7)
        axis.set_xticks(range(len(cfg.objectives)), cfg.objectives, fontsize=8)
        axis.set_title(measure, fontsize=9)
        floor_line(axis, (floors or {}).get(measure))
    figure.suptitle("fine-tuning runs (each pre-training seed × fine-tuning seed)", fontsize=10)
    figure.tight_layout()
    save_png(figure, path)
