"""The "lmlab pretrain defaults" row of benchmarks/gpu_check.py: `lmlab pretrain` as a user types
it, with nothing but the model and batch given, stopped (SIGTERM, a clean stop) a set time after
its first log line, and its logged tokens/s (the median of its log lines after the first, which
holds compilation) read back from metrics.jsonl."""

from __future__ import annotations

import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# GPT-2 small (124M) is lmlab's gpt2-base; --tiny's is the CPU's smoke test.
COMMANDS = {False: ["--objective", "clm", "--model", "gpt2-base", "--seq-len", "1024",
                    "--batch-size", "16"],
            True: ["--objective", "clm", "--model", "gpt2-tiny", "--seq-len", "32",
                   "--batch-size", "4"]}
START_LIMIT_S = 300  # preparing the built-in corpus and the first steps, at most
HEAD_LINES = 12  # of its output: what it chose and why
PROGRESS = re.compile(r"\[\d+:\d\d")  # a progress bar's elapsed time


def pretrain_defaults(tiny: bool, seconds: float, device, notes: list[str]) -> dict:
    """The row: tokens/s of `lmlab pretrain` run for `seconds` after its first log line."""
    arguments = COMMANDS[tiny]
    with tempfile.TemporaryDirectory() as work:
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": os.pathsep.join(
            [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
        # the built-in corpus prepared in the check's own folder: a fresh machine's home may
        # hold none, or not be writable
        env.setdefault("LMLAB_CACHE_DIR", str(Path(work) / "cache"))
        if device.type == "cpu":
            env["CUDA_VISIBLE_DEVICES"] = ""  # the check's device, even on a GPU machine
        log = Path(work) / "output.txt"
        with log.open("w") as output:
            process = subprocess.Popen([sys.executable, "-m", "lmlab", "pretrain", *arguments],
                                       cwd=work, env=env, stdout=output,
                                       stderr=subprocess.STDOUT)
            records = _run_for(process, Path(work) / "runs" / "clm" / "metrics.jsonl",
                               seconds)
        said = [line for line in log.read_text(errors="replace").splitlines()
                if line.strip() and not PROGRESS.search(line)]
    rates = [r["tokens_per_second"] for r in records[1:]] or [
        r["tokens_per_second"] for r in records]
    if not rates:
        notes.append("lmlab pretrain defaults: no log line came; see its output")
    return {"name": "lmlab pretrain defaults",
            "command": "lmlab pretrain " + " ".join(arguments),
            "tokens_per_s": statistics.median(rates) if rates else None,
            "log_lines": len(records), "exit_code": process.returncode,
            "ms_per_step": None, "mfu": None, "vs_nanogpt": None, "vs_hf": None,
            "repeats": len(rates), "output_head": said[:HEAD_LINES],
            "output_tail": said[HEAD_LINES:][-HEAD_LINES:]}


def _run_for(process: subprocess.Popen, metrics: Path, seconds: float) -> list[dict]:
    """Let `process` train until `seconds` after its first train log line (or its end), stop
    it as Ctrl-C would, and return its train records."""
    deadline = time.monotonic() + START_LIMIT_S
    while process.poll() is None and not _train_records(metrics):
        if time.monotonic() > deadline:
            break
        time.sleep(0.5)
    stop_at = time.monotonic() + seconds
    while process.poll() is None and time.monotonic() < stop_at:
        time.sleep(0.5)
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=120)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    return _train_records(metrics)


def _train_records(metrics: Path) -> list[dict]:
    from lmlab.runs.metrics import read_metrics

    return [r for r in read_metrics(metrics.parent)
            if r.get("kind") == "train" and "tokens_per_second" in r]
