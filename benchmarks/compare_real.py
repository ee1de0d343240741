"""Which objective on real text: `lmlab compare` of MLM, CLM and the GPT-BERT-style mixture on
the shared corpora (Brown and the State of the Union addresses), with fine-tuning probes on
SST-2, SICK (entailment) and WNUT-17 and minimal pairs from BLiMP, within a CPU budget.

    python benchmarks/compare_real.py [--shared ../shared/data] [--work /tmp/lmlab-compare-real]
        [--budget 3e13] [--seeds 2] [--model modern-tiny] [--workers 1]

Every step is an `lmlab` command. The corpora are prepared with an 8,192-token vocabulary;
SST-2's training file is cut to its first --train-rows rows, 872 seeded rows of the rest choose
the checkpoint and its dev set is the test (its test labels are hidden; benchmarks/splits.py);
SICK uses its own TRAIN/TRIAL/TEST split; BLiMP is cut to the first --pairs-per-phenomenon pairs
of each of its 67 phenomena. Copies the report's JSON, page and PNGs to
benchmarks/results/compare_real/, their paths written as benchmarks/record.py writes them (the
--work folder as $WORK).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

from record import ROOT, portable_text, write_results
from splits import sst2_splits

RESULTS = Path(__file__).parent / "results" / "compare_real"


def lmlab(*args) -> None:
    subprocess.run([sys.executable, "-m", "lmlab", *map(str, args)], check=True, cwd=ROOT)


def first_lines(source: Path, out: Path, count: int) -> Path:
    with open(source, encoding="utf-8") as lines:
        out.write_text("".join(line for _, line in zip(range(count), lines, strict=False)),
                       encoding="utf-8")
    return out


def probes(shared: Path, work: Path, train_rows: int) -> list[str]:
    sst2_train, sst2_selection, sst2_test = sst2_splits(shared / "sst2", work, train_rows)
    sick = shared / "sick" / "SICK.txt"
    sick_config = work / "sick-entailment.yaml"
    sick_config.write_text(
        f"task: pairs\ntrain: {sick}\ntrain_where: SemEval_set=TRAIN\nvalidation: {sick}\n"
        f"validation_where: SemEval_set=TRIAL\ntest: {sick}\ntest_where: SemEval_set=TEST\n"
        f"label_column: entailment_label\nmax_len: 64\n")
    wnut = shared / "wnut17"
    return [f"sst2=classify:{sst2_train}:{sst2_selection}:{sst2_test}",
            f"sick={sick_config}",
            f"wnut17=ner:{wnut / 'wnut17train.conll'}:{wnut / 'emerging.dev.conll'}:"
            f"{wnut / 'emerging.test.annotated'}"]


def blimp_subset(shared: Path, work: Path, per_phenomenon: int) -> Path:
    out = work / "blimp"
    out.mkdir(parents=True, exist_ok=True)
    for path in sorted((shared / "blimp").glob("*.jsonl")):
        first_lines(path, out / path.name, per_phenomenon)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--work", type=Path, default=Path("/tmp/lmlab-compare-real"))
    parser.add_argument("--objectives", default="mlm,clm,mix:clm=1,mlm=15")
    parser.add_argument("--budget", default="3e13", help="training FLOPs at the full budget")
    parser.add_argument("--fractions", default="1/4,1/2,1")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--model", default="modern-tiny")
    parser.add_argument("--train-rows", type=int, default=4000)
    parser.add_argument("--pairs-per-phenomenon", type=int, default=50)
    parser.add_argument("--probe-epochs", type=float, default=2.0)
    parser.add_argument("--probe-lr", type=float, default=5e-4)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    data = args.work / "data"
    if not (data / "meta.json").exists():
        lmlab("prepare", *sorted((args.shared / "corpora").glob("*.jsonl")), "--out", data,
              "--vocab-size", 8192)
    words = ["compare", "--objectives", args.objectives, "--data", data, "--budget",
             args.budget, "--fractions", args.fractions, "--seeds", args.seeds, "--model",
             args.model, "--pairs", blimp_subset(args.shared, args.work, args.pairs_per_phenomenon),
             "--probe-epochs", args.probe_epochs, "--probe-lr", args.probe_lr, "--workers",
             args.workers, "--out", args.work / "lab"]
    for probe in probes(args.shared, args.work, args.train_rows):
        words += ["--probe", probe]
    lmlab(*words)
    RESULTS.mkdir(parents=True, exist_ok=True)
    lab = args.work / "lab"
    record = json.loads((lab / "comparison.json").read_text())  # names its machine itself
    write_results(RESULTS / "comparison.json", record, args.work)
    page = portable_text((lab / "report.html").read_text(), args.work)
    (RESULTS / "report.html").write_text(page, encoding="utf-8")
    for png in lab.glob("*.png"):
        shutil.copy(png, RESULTS / png.name)
    print(f"copied the report to {RESULTS}")


if __name__ == "__main__":
    main()
