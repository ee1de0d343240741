"""`lmlab compare --cluster ray` on a Ray cluster of two one-CPU worker nodes on this machine:
the same scores and verdicts as `--workers 1` for the same seeds, the same resume, a sub-run
that fails raised in one line once the others are done, and a pre-training run as a torchrun
job; the cluster options refused in one line before anything is written."""

import json
import re
import subprocess
import sys

import numpy as np
import pytest

from lmlab.cli import main
from lmlab.compare.arms import sub_runs
from lmlab.compare.subrun import complete, read_ledger, read_scores
from lmlab.data.dataset import open_dataset
from tests.cli_process import ENV, ROOT, free_port, lmlab
from tests.test_compare import design, world  # noqa: F401 — the synthetic language


def words(files: dict, out, *extra) -> list[str]:
    """A comparison of 4 small sub-runs (2 objectives x 2 seeds), each a few seconds, on the
    synthetic language's `files`: enough for the probe to name masked LM better."""
    return ["compare", "--objectives", "mlm,clm", "--budget", "40", "--match", "steps",
            "--fractions", "1", "--seeds", "2", "--data", files["data"], "--model",
            "modern-tiny", "--seq-len", "32", "--batch-size", "16", "--lr", "3e-3",
            "--eval-tokens", "2000", "--probe", files["probe"], "--probe-epochs", "4",
            "--probe-lr", "1e-3", "--pairs", files["pairs"], "--out", str(out), *extra]


def on_ray(address: str, *args) -> subprocess.CompletedProcess:
    """`lmlab ARGS --cluster ray` with RAY_ADDRESS set, as a user runs it; never a traceback."""
    result = subprocess.run([sys.executable, "-m", "lmlab", *args, "--cluster", "ray"],
                            capture_output=True, text=True, timeout=600, cwd=ROOT,
                            env={**ENV, "RAY_ADDRESS": address})
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    return result


def scores(out) -> dict[str, dict[str, np.ndarray]]:
    found = {}
    for path in sorted(out.glob("runs/*/*/*/scores.npz")):
        with np.load(path) as saved:
            found[str(path.parent.relative_to(out))] = {k: saved[k] for k in saved.files}
    return found


def verdicts(out) -> list[dict]:
    return json.loads((out / "comparison.json").read_text())["verdicts"]


@pytest.mark.slow
def test_a_ray_cluster_gives_what_one_worker_gives_and_resumes_alike(world, ray_address,  # noqa: F811
                                                                      tmp_path):
    local, ray = tmp_path / "local", tmp_path / "ray"
    lmlab(*words(world, local))
    result = on_ray(ray_address, *words(world, ray))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "4 pre-training runs: 0 done, 4 to run (mlm 2, clm 2)" in result.stdout
    # one task at a time per one-CPU node: the sub-runs ran in two worker processes
    assert len(set(re.findall(r"\(_complete pid=(\d+)", result.stderr))) == 2
    # one thread each, the same seeds: the same numbers to the bit, so the same verdicts
    expected = scores(local)
    assert len(expected) == 4 and scores(ray).keys() == expected.keys()
    for run, measures in scores(ray).items():
        assert measures.keys() == expected[run].keys()
        for name, values in measures.items():
            np.testing.assert_array_equal(values, expected[run][name], err_msg=f"{run} {name}")
    assert verdicts(ray) == verdicts(local)
    assert {v["says"] for v in verdicts(local)} == {"mlm better", "no detectable difference"}

    # a sub-run whose checkpoint is damaged fails; the one beside it is scored all the same
    broken, rescored = ray / "runs/clm/budget-1/seed-1", ray / "runs/mlm/budget-1/seed-0"
    for path in (broken / "scores.npz", broken / "pretrained.json", rescored / "scores.npz"):
        path.unlink()
    (weights,) = broken.glob("checkpoints/*/model.safetensors")
    weights.write_bytes(weights.read_bytes() + b"x")
    result = on_ray(ray_address, *words(world, ray))
    errors = [line for line in result.stderr.splitlines() if line.startswith("lmlab: error:")]
    assert result.returncode == 1 and len(errors) == 1, result.stderr[-3000:]
    assert "missing or corrupt" in errors[0]
    assert "sub-run clm budget 1 seed 1" in result.stdout + result.stderr
    assert (rescored / "scores.npz").is_file()

    # without it, the next run trains only it, to the same numbers
    for path in sorted(broken.rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    result = on_ray(ray_address, *words(world, ray))
    assert "4 pre-training runs: 3 done, 1 to run (clm 1)" in result.stdout, result.stderr
    assert scores(ray).keys() == expected.keys()
    for name, values in scores(ray)["runs/clm/budget-1/seed-1"].items():
        np.testing.assert_array_equal(values, expected["runs/clm/budget-1/seed-1"][name])
    # where the sub-runs trained is no part of the design: the local comparison continues on Ray
    result = on_ray(ray_address, *words(world, local))
    assert "4 pre-training runs: 4 done, 0 to run" in result.stdout, result.stderr


@pytest.mark.slow
def test_a_sub_run_no_node_can_hold_is_refused_in_one_line(world, ray_address,  # noqa: F811
                                                           tmp_path):
    result = on_ray(ray_address, *words(world, tmp_path / "c"), "--cpus-per-run", "2")
    errors = [line for line in result.stderr.splitlines() if line.startswith("lmlab: error:")]
    assert result.returncode == 1 and errors == [
        "lmlab: error: --cluster ray: no node has 2 CPUs and 0 GPUs free for a sub-run (the "
        "largest has 1 CPUs, 0 GPUs); lower --cpus-per-run or --gpus-per-run"], result.stderr
    assert "comparison:" not in result.stderr  # no progress bar
    assert not (tmp_path / "c").exists()  # no design.json


@pytest.mark.slow
def test_more_than_one_gpu_per_run_pre_trains_it_as_a_torchrun_job(world, tmp_path,  # noqa: F811
                                                                   monkeypatch):
    """The task's path for --gpus-per-run 2, run here on the CPU (two gloo ranks)."""
    dataset = open_dataset(world["data"])
    launched = []
    run = subprocess.run
    monkeypatch.setattr(subprocess, "run", lambda command, **kw: launched.append(command)
                        or run(command, **kw))
    found = {}
    for ranks in (1, 2):
        cfg = design(world, "mlm,clm", tmp_path / f"ranks-{ranks}", seeds=1,
                     cluster="ray", gpus_per_run=2)
        sub = next(s for s in sub_runs(cfg, dataset) if s.objective == "clm")
        complete(sub, cfg, world["data"], ranks=ranks)
        found[ranks] = read_ledger(sub)["steps"], read_scores(sub)["bits per byte"]
    (command,) = launched
    assert command[1:9] == ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                            "2", "-m", "lmlab", "pretrain"]
    # the same steps of the same global batch, split over two ranks: the same model, but for
    # the order of floating-point sums
    assert found[2][0] == found[1][0] == 40
    assert found[2][1].mean() == pytest.approx(found[1][1].mean(), rel=0.01)


@pytest.mark.parametrize("arguments,message", [
    (["--gpus-per-run", "1"], "--cpus-per-run and --gpus-per-run are what each sub-run asks"),
    (["--cluster", "ray", "--workers", "2"], "--workers is for --cluster local"),
    (["--cluster", "ray", "--cpus-per-run", "0"], "--cpus-per-run must be at least 1"),
    (["--cluster", "ray", "--gpus-per-run", "3"], "--batch-size 32 does not split evenly"),
])
def test_cluster_options_are_refused_in_one_line_before_anything_is_written(
        world, tmp_path, capsys, arguments, message):  # noqa: F811
    out = tmp_path / "lab"
    assert main(["compare", "--objectives", "mlm,clm", "--budget", "10", "--match", "steps",
                 "--data", world["data"], "--out", str(out), *arguments]) == 1
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not out.exists()


def test_ray_missing_is_refused_naming_the_extra(world, tmp_path, capsys, monkeypatch):  # noqa: F811
    monkeypatch.setitem(sys.modules, "ray", None)  # as if not installed
    assert main(["compare", "--objectives", "mlm,clm", "--budget", "10", "--match", "steps",
                 "--data", world["data"], "--out", str(tmp_path / "lab"), "--cluster",
                 "ray"]) == 1
    assert capsys.readouterr().err.strip() == (
        "lmlab: error: --cluster ray needs the ray package: pip install 'lmlab[ray]'")


def test_ray_needs_the_clusters_address(world, tmp_path, capsys, monkeypatch):  # noqa: F811
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert main(["compare", "--objectives", "mlm,clm", "--budget", "10", "--match", "steps",
                 "--data", world["data"], "--out", str(tmp_path / "lab"), "--cluster",
                 "ray"]) == 1
    err = capsys.readouterr().err
    assert err == ("lmlab: error: --cluster ray needs RAY_ADDRESS, the address of the "
                   "cluster's head node (`ray start --head` prints it)\n")  # and no bar
    assert not (tmp_path / "lab").exists()  # no design.json


def test_no_cluster_at_the_address_is_one_line_at_once(world, tmp_path, capsys,  # noqa: F811
                                                       monkeypatch):
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    monkeypatch.setenv("RAY_ADDRESS", address)
    assert main(["compare", "--objectives", "mlm,clm", "--budget", "10", "--match", "steps",
                 "--data", world["data"], "--out", str(tmp_path / "lab"), "--cluster",
                 "ray"]) == 1
    assert capsys.readouterr().err == (f"lmlab: error: --cluster ray: no Ray cluster answers "
                                       f"at {address} (RAY_ADDRESS): Connection refused\n")
    assert not (tmp_path / "lab").exists()
