"""Training curves as a PNG, written atomically."""

from __future__ import annotations

from pathlib import Path

from lmlab.atomic import atomic_write


def plot_training_curves(metrics: list[dict], out_path: Path) -> None:
    """Train and validation loss against step (top) and the learning rate (bottom)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train = [r for r in metrics if r.get("kind") == "train" and "lr" in r]
    evals = [r for r in metrics if r.get("kind") == "eval"]
    figure, (loss_axis, lr_axis) = plt.subplots(2, 1, figsize=(8, 6), sharex=True,
                                                gridspec_kw={"height_ratios": [3, 1]})
    loss_axis.plot([r["step"] for r in train], [r["loss"] for r in train], label="train loss")
    eval_keys = sorted({k for r in evals for k in r if k.endswith("_loss")})
    for key in eval_keys:
        points = [(r["step"], r[key]) for r in evals if key in r]
        loss_axis.plot(*zip(*points, strict=True), marker="o", label=f"validation {key}")
    loss_axis.set_ylabel("loss (nats)")
    loss_axis.legend()
    loss_axis.grid(alpha=0.3)
    lr_axis.plot([r["step"] for r in train], [r["lr"] for r in train], color="gray")
    lr_axis.set_ylabel("learning rate")
    lr_axis.set_xlabel("step")
    figure.tight_layout()
    out_path = Path(out_path)
    with atomic_write(out_path, "wb") as f:
        figure.savefig(f, format="png", dpi=100)
    plt.close(figure)
