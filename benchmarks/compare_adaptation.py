"""`lmlab compare --init`: should all-MiniLM-L6-v2 be continued with masked LM on SST-2's
sentences before fine-tuning on SST-2? The adaptation against `none` (the model as it came),
each fine-tuned on a probe of --train-rows SST-2 rows, as a user runs it, timed whole.

    python benchmarks/compare_adaptation.py [--steps 60] [--seeds 2] [--probe-seeds 3]
        [--eval-tokens 4000] [--train-rows 1000] [--work /tmp/lmlab-compare-adaptation]

One budget (the full one) and a small held-out sample for pseudo bits per byte (each token
scored masked on its own), so that the question a user asks takes minutes, not hours.

The base is imported and its text prepared as benchmarks/adaptation_defaults.py does (the same
SST-2 sentences past the probe's rows); the probe's checkpoint is chosen on rows carved from
training and its test is SST-2's dev set (benchmarks/splits.py). Writes benchmarks/results/
compare_adaptation.json: the command's wall time and CPU minutes, and its verdicts.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

from adaptation_defaults import domain_text, imported
from record import ROOT, SHARED, machine, write_results
from splits import sst2_splits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--probe-seeds", type=int, default=3)
    parser.add_argument("--eval-tokens", type=int, default=4000)
    parser.add_argument("--train-rows", type=int, default=1000)
    parser.add_argument("--work", type=Path, default=Path("/tmp/lmlab-compare-adaptation"))
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    base = imported("minilm", args.work)
    data = args.work / "data"
    if not (data / "meta.json").is_file():
        subprocess.run([sys.executable, "-m", "lmlab", "prepare",
                        domain_text("sst2", args.work, args.train_rows + 1000),
                        "--tokenizer", base, "--out", data], check=True, cwd=ROOT)
    train, selection, test = sst2_splits(SHARED / "data/sst2", args.work, args.train_rows)
    command = ["lmlab", "compare", "--init", str(base), "--objectives", "none,mlm",
               "--data", str(data), "--match", "steps", "--budget", str(args.steps),
               "--fractions", "1", "--seeds", str(args.seeds), "--eval-tokens",
               str(args.eval_tokens), "--seq-len", "64", "--batch-size", "32",
               "--optimizer", "adamw", "--probe", f"sst2=classify:{train}:{selection}:{test}",
               "--probe-seeds", str(args.probe_seeds), "--probe-epochs", "1",
               "--out", str(args.work / "comparison")]
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", *command], check=True, cwd=ROOT)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_minutes = (after.ru_utime + after.ru_stime - cpu.ru_utime - cpu.ru_stime) / 60
    found = json.loads((args.work / "comparison" / "comparison.json").read_text())
    write_results(Path(__file__).parent / "results" / "compare_adaptation.json", {
        "machine": machine(), "command": command, "wall_minutes": round(wall / 60, 2),
        "cpu_minutes": round(cpu_minutes, 2), "verdicts": found["verdicts"]}, args.work)


if __name__ == "__main__":
    main()
