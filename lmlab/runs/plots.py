"""The plots a run directory holds: training curves and confusion matrices as PNGs, written
atomically, and the matplotlib plumbing every figure of lmlab shares (the Agg backend, atomic
PNGs, legends only where something is labelled, a font for every label's characters)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from pathlib import Path

from lmlab.atomic import atomic_write
from lmlab.runs.metrics import loss_name


def pyplot():
    """matplotlib's pyplot on the file-only Agg backend (no display on a server)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_png(figure, out_path: Path) -> None:
    """Write `figure` as a PNG atomically and free it."""
    with atomic_write(Path(out_path), "wb") as f:
        figure.savefig(f, format="png", dpi=100)
    pyplot().close(figure)


def legend(axis, **options) -> None:
    """`axis`'s legend, where it has a labelled artist to show: a run stopped before its first
    validation has none, and matplotlib warns of an empty legend."""
    if axis.get_legend_handles_labels()[1]:
        axis.legend(**options)


def plot_training_curves(metrics: list[dict], out_path: Path, scores: tuple[str, ...] = (),
                         title: str = "") -> None:
    """Train and validation loss against step (top), the validation `scores` such as a
    fine-tuned task's accuracy (middle, when given) and the learning rate (bottom)."""
    plt = pyplot()
    train = [r for r in metrics if r.get("kind") == "train" and "lr" in r]
    evals = [r for r in metrics if r.get("kind") == "eval"]
    ratios = [3, 2, 1] if scores else [3, 1]
    figure, axes = plt.subplots(len(ratios), 1, figsize=(8, 2 * len(ratios) + 2), sharex=True,
                                gridspec_kw={"height_ratios": ratios})
    loss_axis, lr_axis = axes[0], axes[-1]
    if scores:
        for key in scores:
            points = [(r["step"], r[key]) for r in evals if key in r]
            if points:
                axes[1].plot(*zip(*points, strict=True), marker="o", label=f"validation {key}")
        axes[1].set_ylabel("score")
        legend(axes[1])
        axes[1].grid(alpha=0.3)
    loss_axis.plot([r["step"] for r in train], [r["loss"] for r in train],
                   label="training loss (batch by batch)")
    eval_keys = sorted({k for r in evals for k in r if k.endswith("_loss")})
    for key in eval_keys:
        points = [(r["step"], r[key]) for r in evals if key in r]
        loss_axis.plot(*zip(*points, strict=True), marker="o", label=loss_name(key))
    loss_axis.set_ylabel("loss (nats)")
    if title:
        loss_axis.set_title(title)
    legend(loss_axis)
    loss_axis.grid(alpha=0.3)
    lr_axis.plot([r["step"] for r in train], [r["lr"] for r in train], color="gray")
    lr_axis.set_ylabel("learning rate")
    lr_axis.set_xlabel("step")
    figure.tight_layout()
    save_png(figure, out_path)


@cache
def _characters(font_path: str) -> frozenset[int]:
    """The code points a font file has glyphs for (none for a file FreeType cannot read)."""
    from matplotlib import ft2font

    try:
        return frozenset(ft2font.FT2Font(font_path).get_charmap())
    except (OSError, RuntimeError):
        return frozenset()


def label_font(labels: Sequence[str]):
    """A font drawing every character of `labels` (matplotlib's default when it does, else
    the first installed one that does, such as Noto CJK for Chinese), or None when no
    installed font does: matplotlib would draw boxes and warn of each missing glyph."""
    from matplotlib import font_manager

    needed = {ord(c) for label in labels for c in label if not c.isspace()}
    default = font_manager.findfont(font_manager.FontProperties())
    # Last Resort maps every character to a box naming its Unicode block: drawn, not read.
    paths = dict.fromkeys([default, *(font.fname for font in font_manager.fontManager.ttflist
                                      if not font.name.startswith("Last Resort"))])
    return next((font_manager.FontProperties(fname=path) for path in paths
                 if needed <= _characters(path)), None)


def plot_confusion_matrix(matrix, labels: list[str], out_path: Path) -> None:
    """Counts of gold (rows) against predicted (columns) labels, each cell annotated. Labels no
    installed font can draw are shown by their index in the run's label list."""
    plt = pyplot()
    size = max(4.0, 0.6 * len(labels) + 2)
    figure, axis = plt.subplots(figsize=(size, size))
    axis.imshow(matrix, cmap="Blues")
    font = label_font(labels)
    names = labels if font is not None else [str(i) for i in range(len(labels))]
    axis.set_xticks(range(len(labels)), names, rotation=45, ha="right", fontproperties=font)
    axis.set_yticks(range(len(labels)), names, fontproperties=font)
    if font is None:
        axis.set_title("labels by their index in config.json's task labels\n"
                       "(no installed font draws their names)", fontsize=8)
    axis.set_xlabel("predicted")
    axis.set_ylabel("gold")
    peak = matrix.max() if matrix.size else 0
    for row in range(len(labels)):
        for column in range(len(labels)):
            value = matrix[row, column]
            axis.text(column, row, str(value), ha="center", va="center",
                      color="white" if value > peak / 2 else "black")
    figure.tight_layout()
    save_png(figure, out_path)
