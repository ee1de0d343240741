"""Experiment trackers fed from metrics.jsonl's records (`--report-to`): TensorBoard, MLflow,
Trackio and Weights & Biases, each an optional extra, each offline by default.

metrics.jsonl stays the record of a run; a tracker sees each of its records as it is written
(training loss, learning rate, gradient norm, tokens per second, MFU; validation metrics),
the run's config.json when it opens, and curves.png when the run ends. Only rank 0 reports.
A resumed run opens a new tracker run from the step it resumed at (TensorBoard's event files,
one stream per run directory, drop the steps that are redone).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Protocol

from lmlab.config.training import trackers_named
from lmlab.runs.layout import CONFIG
from lmlab.runs.schema import read_run_config

PROJECT = "lmlab"  # MLflow's experiment, Trackio's and W&B's project, unless set otherwise


class Tracker(Protocol):
    def log(self, record: dict, step: int) -> None:
        """One metrics.jsonl record, as written."""

    def finish(self, curves_png: Path | None) -> None:
        """The end of the run (its curves, when they were drawn)."""


def open_trackers(report_to: str | None, run_dir: Path, resumed_at: int) -> list[Tracker]:
    """A tracker per name in `report_to` for the run in `run_dir` (its config.json written),
    which resumes after step `resumed_at` (0: a new run)."""
    run_dir = Path(run_dir)
    names = trackers_named(report_to)  # checked, packages too, when the config was made
    config = read_run_config(run_dir / CONFIG).to_json() if names else {}
    return [SINKS[name](run_dir, config, resumed_at) for name in names]


def scalars(record: dict) -> dict[str, float]:
    """A record's numbers by `kind/name`: train/loss, train/lr, eval/loss, ..."""
    return {f"{record['kind']}/{name}": float(value) for name, value in record.items()
            if name not in ("kind", "step") and isinstance(value, int | float)
            and not isinstance(value, bool)}


def flat(config: dict, prefix: str = "") -> dict[str, object]:
    """Nested settings as `train.lr`, `model.d_model`, ... (MLflow's parameters)."""
    found = {}
    for key, value in config.items():
        if isinstance(value, dict) and value:
            found.update(flat(value, f"{prefix}{key}."))
        else:
            found[f"{prefix}{key}"] = value
    return found


class TensorBoard:
    """Event files in RUN/tensorboard (`tensorboard --logdir RUN`): scalars by kind/name, the
    config as text, the curves as an image."""

    def __init__(self, run_dir: Path, config: dict, resumed_at: int) -> None:
        from torch.utils.tensorboard import SummaryWriter

        # a resumed run redoes the steps after its checkpoint: their old events are dropped
        self.writer = SummaryWriter(str(run_dir / "tensorboard"),
                                    purge_step=resumed_at + 1 if resumed_at else None)
        self.step = resumed_at
        text = json.dumps(config, indent=2).replace("\n", "\n    ")
        self.writer.add_text("config", "    " + text, resumed_at)

    def log(self, record: dict, step: int) -> None:
        for name, value in scalars(record).items():
            self.writer.add_scalar(name, value, step)
        self.writer.flush()
        self.step = step

    def finish(self, curves_png: Path | None) -> None:
        if curves_png is not None:
            import numpy as np
            from PIL import Image

            with Image.open(curves_png) as image:
                pixels = np.asarray(image.convert("RGB"))
            self.writer.add_image("curves", pixels, self.step, dataformats="HWC")
        self.writer.close()


class MLflow:
    """A run in MLFLOW_TRACKING_URI, else in a file store in RUN/mlruns, under the experiment
    MLFLOW_EXPERIMENT_NAME (default lmlab): metrics, the settings as parameters, config.json
    and curves.png as artifacts."""

    def __init__(self, run_dir: Path, config: dict, resumed_at: int) -> None:
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        uri = os.environ.get("MLFLOW_TRACKING_URI")
        if not uri:
            uri = (run_dir / "mlruns").resolve().as_uri()
            # MLflow 3 asks for this opt-in to use a file store; it needs no database
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self.client = MlflowClient(uri)
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME", PROJECT)
        found = self.client.get_experiment_by_name(name)
        experiment = found.experiment_id if found else self.client.create_experiment(name)
        tags = {"lmlab.run_dir": str(run_dir.resolve()), "lmlab.resumed_at": str(resumed_at)}
        self.run_id = self.client.create_run(experiment, run_name=run_dir.name,
                                             tags=tags).info.run_id
        self.client.log_batch(self.run_id, params=[Param(key, str(value)) for key, value in
                                                   flat(config).items()])
        self.client.log_dict(self.run_id, config, CONFIG)

    def log(self, record: dict, step: int) -> None:
        from mlflow.entities import Metric

        now = int(1000 * time.time())
        self.client.log_batch(self.run_id, metrics=[
            Metric(name, value, now, step) for name, value in scalars(record).items()])

    def finish(self, curves_png: Path | None) -> None:
        if curves_png is not None:
            self.client.log_artifact(self.run_id, str(curves_png))
        self.client.set_terminated(self.run_id)


class _LoggedRun:
    """Trackio's and W&B's shape: `run.log(values, step)`, an image type, `run.finish()`."""

    def __init__(self, run, image: type, resumed_at: int) -> None:
        self.run, self.image, self.step = run, image, resumed_at

    def log(self, record: dict, step: int) -> None:
        self.run.log(scalars(record), step=step)
        self.step = step

    def finish(self, curves_png: Path | None) -> None:
        if curves_png is not None:
            self.run.log({"curves": self.image(str(curves_png))}, step=self.step)
        self.run.finish()


class Trackio(_LoggedRun):
    """A run in Trackio's local store (TRACKIO_DIR, default ~/.cache/huggingface/trackio;
    `trackio show`), project TRACKIO_PROJECT (default lmlab), named after the run directory."""

    def __init__(self, run_dir: Path, config: dict, resumed_at: int) -> None:
        import trackio

        super().__init__(trackio.init(project=os.environ.get("TRACKIO_PROJECT", PROJECT),
                                      name=run_dir.name, config=config, auto_log_cpu=False,
                                      auto_log_gpu=False), trackio.Image, resumed_at)


class WandB(_LoggedRun):
    """A Weights & Biases run in RUN/wandb, offline unless WANDB_MODE says otherwise (send it
    later with `wandb sync`), project WANDB_PROJECT (default lmlab)."""

    def __init__(self, run_dir: Path, config: dict, resumed_at: int) -> None:
        import wandb

        super().__init__(wandb.init(project=os.environ.get("WANDB_PROJECT", PROJECT),
                                    name=run_dir.name, dir=str(run_dir), config=config,
                                    mode=os.environ.get("WANDB_MODE", "offline")),
                         wandb.Image, resumed_at)


SINKS = {"tensorboard": TensorBoard, "mlflow": MLflow, "trackio": Trackio, "wandb": WandB}
