"""What each pre-training objective is good for, on real labelled data: a masked and a causal
run, pre-trained for the same time (or the same number of steps, hence tokens) on the same
corpus, each fine-tuned on SST-2, SICK (entailment and relatedness), WNUT-17 and XQuAD; each
task's best checkpoint is chosen on a split that is not its test (benchmarks/splits.py).

    python benchmarks/finetune_real.py [--shared ../shared/data] [--pretrain-minutes 5]
        [--pretrain-steps N] [--train-rows 8000] [--epochs 2] [--work /tmp/lmlab-finetune-real]
        [--objectives mlm clm mix:clm=1,mlm=15] [--model auto] [--random-init]
        [--finetune-lr 1e-4|default] [--seeds 1] [--task-text] [--results FILE]

Every step is an `lmlab` command, as a user would run it. XQuAD (a SQuAD v1.1 dev subset) is
split by article, not by question: the last 20% of articles are the test, a seeded tenth of the
others selects the checkpoint. SST-2's test labels are hidden, so its dev set is the test and
872 seeded rows of its training set select; training keeps its first --train-rows rows to keep a
CPU run short. SICK and WNUT-17 have their own validation and test parts. Classification and
pair tasks also report the bag-of-words floor (`--baseline bow`). `--random-init` adds the
control: the masked objective's model pre-trained for one step at a learning rate of 1e-9,
fine-tuned alike. `--task-text` adds SST-2's training sentences, labels dropped, to the pre-training
corpus (task-adaptive pre-training, Gururangan et al. 2020; the dev set's sentences stay
unseen); its runs go in WORK/with-task-text. Writes benchmarks/results/finetune_real.json unless
--results names another file; a results file is added to only by calls with its own settings.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from record import ROOT, machine, write_results
from splits import sst2_splits, xquad_splits

RESULTS = Path(__file__).parent / "results" / "finetune_real.json"
OBJECTIVES = ("mlm", "clm", "mix:clm=1,mlm=15")
SELECTION = "carved from the training rows (benchmarks/splits.py)"
FLOOR = ["--baseline", "bow"]  # the tasks a bag-of-words floor applies to
# What a results file's figures were measured at, with the values files written before a
# setting was recorded had: a call adds to a file only at the same settings.
SETTINGS = {"pretrain_budget": None, "model": None, "train_rows": None, "epochs": None,
            "finetune_lr": "1e-4", "seeds": 1, "task_text": False,
            # files written before the test chose nothing: SST-2's dev set did both
            "selection": "the reported split (SST-2's dev set chose the checkpoint and is the "
                         "validation block; no held-out test)"}


def lmlab(*args) -> None:
    subprocess.run([sys.executable, "-m", "lmlab", *map(str, args)], check=True, cwd=ROOT)


def tasks(shared: Path, work: Path, train_rows: int) -> dict[str, list]:
    sick = shared / "sick" / "SICK.txt"
    sick_splits = ["--train", sick, "--train-where", "SemEval_set=TRAIN", "--validation", sick,
                   "--validation-where", "SemEval_set=TRIAL", "--test", sick, "--test-where",
                   "SemEval_set=TEST"]
    wnut = shared / "wnut17"
    xquad_train, xquad_selection, xquad_test = xquad_splits(shared / "xquad" / "xquad.en.json",
                                                            work)
    sst2_train, sst2_selection, sst2_test = sst2_splits(shared / "sst2", work, train_rows)
    return {
        "sst2": ["--task", "classify", "--train", sst2_train, "--validation", sst2_selection,
                 "--test", sst2_test, "--max-len", 64, *FLOOR],
        "sick-entailment": ["--task", "pairs", *sick_splits, "--label-column",
                            "entailment_label", "--max-len", 64, *FLOOR],
        "sick-relatedness": ["--task", "regress", *sick_splits, "--text-column", "sentence_A",
                             "--pair-column", "sentence_B", "--label-column",
                             "relatedness_score", "--max-len", 64],
        "wnut17": ["--task", "ner", "--train", wnut / "wnut17train.conll", "--validation",
                   wnut / "emerging.dev.conll", "--test", wnut / "emerging.test.annotated",
                   "--max-len", 128],
        "xquad": ["--task", "qa", "--train", xquad_train, "--validation", xquad_selection,
                  "--test", xquad_test, "--max-len", 128, "--doc-stride", 32],
    }


def task_sentences(shared: Path, work: Path) -> Path:
    """SST-2's training sentences as a JSON-lines corpus, without their labels."""
    out = work / "sst2-sentences.jsonl"
    with open(shared / "sst2" / "train.tsv") as rows, open(out, "w") as lines:
        sentence = next(rows).rstrip("\n").split("\t").index("sentence")
        for row in rows:
            lines.write(json.dumps({"text": row.rstrip("\n").split("\t")[sentence]}) + "\n")
    return out


def file_name(name: str) -> str:
    """An objective spec as a folder name: mix:clm=1,mlm=15 → mix-clm=1-mlm=15."""
    return name.replace(":", "-").replace(",", "-")


def torch_threads() -> int:
    import torch

    return torch.get_num_threads()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--work", type=Path, default=Path("/tmp/lmlab-finetune-real"))
    parser.add_argument("--pretrain-minutes", type=float, default=5.0)
    parser.add_argument("--pretrain-steps", type=int,
                        help="an equal step budget instead of minutes: the same tokens for "
                             "both, whatever else loads the machine")
    parser.add_argument("--train-rows", type=int, default=8000)
    parser.add_argument("--epochs", type=float, default=2.0)
    parser.add_argument("--only", nargs="*", help="task names to run (default: all)")
    parser.add_argument("--objectives", nargs="*", default=["mlm", "clm"],
                        help=f"which objectives to pre-train and fine-tune, e.g. "
                             f"{' '.join(OBJECTIVES)}")
    parser.add_argument("--model", default="auto", help="the preset every run pre-trains")
    parser.add_argument("--random-init", action="store_true",
                        help="also fine-tune the masked model's shape from random weights")
    parser.add_argument("--finetune-lr", default="1e-4",
                        help="fine-tuning's peak learning rate (1e-4, as earlier results "
                             "used), or 'default': lmlab finetune's own, which grows as the "
                             "model narrows")
    parser.add_argument("--seeds", type=int, default=1,
                        help="fine-tunings per run and task; more than one reports the "
                             "mean and standard deviation of each metric")
    parser.add_argument("--task-text", action="store_true",
                        help="also pre-train on SST-2's training sentences, labels dropped")
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--run", action="append", default=[], metavar="NAME=RUN",
                        help="also fine-tune this run as it is, e.g. an imported encoder "
                             "(minilm=runs/minilm)")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    dataset = args.work / ("corpora+sst2" if args.task_text else "corpora")
    if (args.objectives or args.random_init) and not (dataset / "meta.json").is_file():
        extra = [task_sentences(args.shared, args.work)] if args.task_text else []
        lmlab("prepare", args.shared / "corpora" / "brown.jsonl",
              args.shared / "corpora" / "sotu.jsonl", *extra, "--out", dataset, "--tokenizer",
              "wordpiece", "--vocab-size", 16384)
    budget = (["--steps", args.pretrain_steps] if args.pretrain_steps else
              ["--minutes", args.pretrain_minutes])
    results = {"machine": machine(threads=torch_threads()),
               "pretrain_budget": " ".join(map(str, budget)), "model": args.model,
               "train_rows": args.train_rows, "epochs": args.epochs,
               "finetune_lr": args.finetune_lr, "seeds": args.seeds,
               "task_text": args.task_text, "selection": SELECTION, "runs": {}}
    if args.results.is_file():  # keep what earlier invocations measured, and do not redo it
        earlier = json.loads(args.results.read_text())
        differ = [name for name, before in SETTINGS.items()
                  if earlier.get(name, before) != results[name]]
        if differ:
            sys.exit(f"{args.results} holds results at other settings ({', '.join(differ)}); "
                     f"name another --results")
        results["runs"] = earlier.get("runs", {})
    home = args.work / "with-task-text" if args.task_text else args.work
    runs = dict(named.split("=", 1) for named in args.run)
    pretraining = {objective: budget for objective in args.objectives}
    if args.random_init:
        pretraining["random-init"] = ["--steps", 1, "--lr", 1e-9]
    for name, run_budget in pretraining.items():
        run = runs[name] = home / file_name(name)
        if not (run / "checkpoints").is_dir():
            objective = "mlm" if name == "random-init" else name
            lmlab("pretrain", "--objective", objective, "--model", args.model, "--data",
                  dataset, *run_budget, "--seq-len", 128, "--out", run)
    for name, run in runs.items():
        for task, options in tasks(args.shared, args.work, args.train_rows).items():
            if (args.only and task not in args.only) or f"{name}/{task}" in results["runs"]:
                continue
            out = home / f"{file_name(name)}-{task}"
            start = time.perf_counter()
            rate = [] if args.finetune_lr == "default" else ["--lr", args.finetune_lr]
            lmlab("finetune", run, *options, "--epochs", args.epochs, "--out", out,
                  "--overwrite", *rate, "--batch-size", 32, "--seeds", args.seeds)
            found = json.loads((out / ("seeds.json" if args.seeds > 1 else
                                       "results.json")).read_text())
            found["seconds"] = round(time.perf_counter() - start, 1)  # all its seeds
            found["pretrain_budget"] = " ".join(map(str, pretraining.get(name, ["as given"])))
            results["runs"][f"{name}/{task}"] = found
            write_results(args.results, results, args.work)
    print(json.dumps({k: v.get("test") or v.get("validation")
                      for k, v in results["runs"].items()}, indent=2))


if __name__ == "__main__":
    main()
