"""--report-to: TensorBoard, MLflow, Trackio and W&B fed from metrics.jsonl's records, each read
back with its own reader; an unknown or missing tracker is one line before anything is
written."""

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from lmlab.cli import main
from lmlab.config.training import TrainConfig
from lmlab.runs.metrics import read_metrics
from lmlab.train import entry as pretraining
from tests.synthetic_run import synthetic_dataset

SCRIPT = Path(__file__).with_name("synthetic_run.py")
TINY = dict(objective="clm", model="gpt2-tiny", seq_len=32, batch_size=8, lr=3e-3, log_every=1,
            eval_every=3, checkpoint_every=3)


def logged(run: Path, kind: str, name: str) -> dict[int, float]:
    """metrics.jsonl's values of `name` in `kind` records, by step."""
    return {r["step"]: r[name] for r in read_metrics(run) if r["kind"] == kind}


def test_tensorboard_and_mlflow_hold_what_metrics_jsonl_holds_across_a_resume(tmp_path,
                                                                              monkeypatch):
    from mlflow.tracking import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3's opt-in to a file store
    dataset = synthetic_dataset()[1]
    both = dict(TINY, out=str(tmp_path / "run"), report_to="tensorboard,mlflow")
    pretraining.pretrain(TrainConfig(**both, steps=4), dataset)
    out = pretraining.pretrain(TrainConfig(**both, steps=6, resume=True), dataset)

    events = EventAccumulator(str(out / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    # the resumed run's redone steps replace the first run's: one value per step
    assert [e.step for e in events.Scalars("train/loss")] == [1, 2, 3, 4, 5, 6]
    for name in ("loss", "lr", "grad_norm", "tokens_per_second", "mfu"):
        found = {e.step: e.value for e in events.Scalars(f"train/{name}")}
        assert found == pytest.approx(logged(out, "train", name), rel=1e-6)
    found = {e.step: e.value for e in events.Scalars("eval/clm/clm_loss")}
    assert found == pytest.approx(logged(out, "eval", "clm/clm_loss"), rel=1e-6)
    assert set(found) == {3, 4, 6}
    assert [(i.step, i.width, i.height) for i in events.Images("curves")] == [(4, 800, 600),
                                                                             (6, 800, 600)]
    config = events.Tensors("config/text_summary")[-1].tensor_proto.string_val[0].decode()
    assert json.loads(config)["train"]["steps"] == 6

    client = MlflowClient((out / "mlruns").resolve().as_uri())
    experiment = client.get_experiment_by_name("lmlab").experiment_id
    first, second = sorted(client.search_runs([experiment]),
                           key=lambda run: int(run.data.tags["lmlab.resumed_at"]))
    assert (first.data.tags["lmlab.resumed_at"], second.data.tags["lmlab.resumed_at"]) == (
        "0", "4")
    for name in ("loss", "lr", "tokens_per_second", "mfu"):
        history = {m.step: m.value for run in (first, second)
                   for m in client.get_metric_history(run.info.run_id, f"train/{name}")}
        assert history == pytest.approx(logged(out, "train", name))
    assert second.data.params["train.objective"] == "clm"
    assert second.data.params["model.n_layers"] == "2"
    assert {a.path for a in client.list_artifacts(second.info.run_id)} == {"config.json",
                                                                          "curves.png"}
    assert first.info.status == second.info.status == "FINISHED"


@pytest.mark.slow
def test_under_torchrun_rank_0_alone_reports(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from tests.test_pretrain import run_script, torchrun

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    out = tmp_path / "run"
    run_script(out, "--objective", "clm", "--steps", "4", "--batch-size", "8",
               "--report-to", "tensorboard,mlflow", launcher=torchrun(2))
    (events_file,) = (out / "tensorboard").iterdir()
    events = EventAccumulator(str(events_file))
    events.Reload()
    losses = logged(out, "train", "loss")
    assert {e.step: e.value for e in events.Scalars("train/loss")} == pytest.approx(losses)
    client = MlflowClient((out / "mlruns").resolve().as_uri())
    (run,) = client.search_runs([client.get_experiment_by_name("lmlab").experiment_id])
    history = client.get_metric_history(run.info.run_id, "train/loss")
    assert {m.step: m.value for m in history} == pytest.approx(losses)


def wandb_records(run: Path) -> list:
    """The records of the one offline W&B run under `run`, from its transaction log (LevelDB's
    log format after a 7-byte header: 32 KiB blocks of checksum, length, type, data)."""
    from wandb.proto import wandb_internal_pb2

    (path,) = run.glob("wandb/offline-run-*/run-*.wandb")
    data, position, pending, found = path.read_bytes(), 7, b"", []
    assert data[:4] == b":W&B"
    while position + 7 <= len(data):
        if 32768 - position % 32768 < 7:  # a block's tail too short for a header: padding
            position += 32768 - position % 32768
            continue
        _, length, kind = struct.unpack("<IHB", data[position:position + 7])
        pending += data[position + 7:position + 7 + length]
        position += 7 + length
        if kind in (1, 4):  # a whole record, or the last piece of one
            found.append(wandb_internal_pb2.Record.FromString(pending))
            pending = b""
    return found


def wandb_history(records: list) -> list[dict]:
    return [{item.key or "/".join(item.nested_key): json.loads(item.value_json)
             for item in record.history.item}
            for record in records if record.WhichOneof("record_type") == "history"]


@pytest.mark.slow
def test_wandb_and_trackio_record_the_run_offline(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "TRACKIO_"))}
    env.update(TRACKIO_DIR=str(tmp_path / "trackio"), HOME=str(tmp_path))
    out = tmp_path / "run"
    options = [f"--{k.replace('_', '-')}={v}" for k, v in TINY.items()]
    done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), "--steps", "4",
                           "--report-to", "wandb,trackio", *options],
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    losses = logged(out, "train", "loss")

    records = wandb_records(out)
    history = wandb_history(records)
    assert {h["_step"]: h["train/loss"] for h in history if "train/loss" in h} == losses
    assert {h["_step"]: h["eval/clm/clm_loss"] for h in history if "eval/clm/clm_loss" in h} == \
        logged(out, "eval", "clm/clm_loss")
    assert (history[-1]["_step"], history[-1]["curves/_type"]) == (4, "image-file")
    (started,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    config = {item.key: json.loads(item.value_json) for item in started.config.update}
    assert config["train"]["objective"] == "clm"

    read = ("import json; from trackio.sqlite_storage import SQLiteStorage as S; "
            "print(json.dumps([S.get_logs('lmlab', 'run'), S.get_run_config('lmlab', 'run')], "
            "default=str))")
    shown = subprocess.run([sys.executable, "-c", read], capture_output=True, text=True,
                           timeout=120, env=env, check=True)
    logs, config = json.loads(shown.stdout.splitlines()[-1])
    assert {r["step"]: r["train/loss"] for r in logs if "train/loss" in r} == losses
    assert any("curves" in r for r in logs)
    assert config["train"]["objective"] == "clm"


@pytest.mark.parametrize("report_to,message", [
    ("tensorbord", "report_to: unknown tracker 'tensorbord'; choose from tensorboard, mlflow, "
                   "trackio, wandb (comma-separated)"),
    ("tensorboard,mlflow", "--report-to mlflow needs the mlflow package: "
                           "pip install 'lmlab[mlflow]'"),
])
def test_an_unknown_or_missing_tracker_is_one_line_before_anything_is_written(
        tmp_path, capsys, monkeypatch, report_to, message):
    monkeypatch.setitem(sys.modules, "mlflow", None)  # as if it were not installed
    out = tmp_path / "run"
    assert main(["pretrain", "--data", str(tmp_path / "none"), "--out", str(out),
                 "--report-to", report_to]) == 1
    err = capsys.readouterr().err.strip()
    assert err == f"lmlab: error: {message}"
    assert not out.exists() and not (tmp_path / "none").exists()
