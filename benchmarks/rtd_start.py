"""How replaced-token detection's discriminator starts, from random weights, for the same steps
on the same corpus and seeds, in three arms: AdamW with the score's bias at zero (every other
bias's start), AdamW with it at the logit of the share of tokens expected replaced (as lmlab
starts it), and Muon with that start. Per run: how much the hidden states still vary across
tokens after each block (the standard deviation over 64 SST-2 sentences' tokens, mean over
dimensions; 0 = every token the same vector, which fine-tuning cannot read), and the
discriminator's held-out loss against the entropy of the replaced share (the loss of
predicting the base rate alone).

    python benchmarks/rtd_start.py [--steps 100] [--seeds 3] [--model bert-mini]

Writes benchmarks/results/rtd_start.json.
"""

from __future__ import annotations

import argparse
import json
import math
from contextlib import contextmanager
from pathlib import Path

from record import ROOT, machine, write_results

RESULTS = Path(__file__).parent / "results" / "rtd_start.json"
ARMS = (("adamw", "zero"), ("adamw", "prior"), ("muon", "prior"))  # (optimizer, bias start)


@contextmanager
def started(start: str):
    """The discriminator as lmlab starts it, or with its score's bias left at zero."""
    from lmlab.model.heads import DiscriminatorHead

    kept = DiscriminatorHead.initialise
    if start == "zero":
        DiscriminatorHead.initialise = lambda self: None
    try:
        yield
    finally:
        DiscriminatorHead.initialise = kept


def token_spread(out: Path, texts: list[str]) -> list[float]:
    """Each block's output: its standard deviation across the texts' tokens, mean over
    dimensions."""
    import torch

    import lmlab

    run = lmlab.load(out, "last")
    seen = {}
    for index, block in enumerate(run.model.backbone.blocks):
        block.register_forward_hook(
            lambda _m, _i, output, index=index: seen.setdefault(index, []).append(
                (output[0] if isinstance(output, tuple) else output).detach().flatten(0, -2)))
    run.embed(texts, batch_size=1)  # one text a batch: no padding among the tokens
    return [round(float(torch.cat(seen[i]).std(0).mean()), 4) for i in sorted(seen)]


def entropy(share: float) -> float:
    return -(share * math.log(share) + (1 - share) * math.log(1 - share))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--work", type=Path, default=Path("/tmp/lmlab-rtd-start"))
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--model", default="bert-mini")
    args = parser.parse_args()
    from lmlab.cli import main as lmlab

    data = args.work / "corpora"
    if not (data / "meta.json").is_file():
        corpora = args.shared / "corpora"
        lmlab(["prepare", str(corpora / "brown.jsonl"), str(corpora / "sotu.jsonl"),
               "--vocab-size", "8192", "--out", str(data)])
    rows = (args.shared / "sst2" / "dev.tsv").read_text().splitlines()[1:65]
    texts = [row.split("\t")[0] for row in rows]
    runs = []
    for seed in range(args.seeds):
        for optimizer, start in ARMS:
            out = args.work / f"{optimizer}-{start}-seed{seed}"
            with started(start):
                code = lmlab(["pretrain", "--objective", "rtd", "--model", args.model,
                              "--optimizer", optimizer, "--steps", str(args.steps), "--seed",
                              str(seed), "--eval-every", str(args.steps), "--data", str(data),
                              "--out", str(out), "--overwrite"])
            if code:
                raise SystemExit(f"pre-training {out.name} failed")
            held_out = [json.loads(line) for line in (out / "metrics.jsonl").open()
                        if '"eval"' in line][-1]
            weight = json.loads((out / "config.json").read_text())["train"][
                "objective_options"]["rtd_weight"]
            share = held_out["rtd/replaced_fraction"]
            runs.append({"optimizer": optimizer, "start": start, "seed": seed,
                         "token_spread_per_block": token_spread(out, texts),
                         "discriminator_bce": held_out["rtd/discriminator_loss"] / weight,
                         "base_rate_entropy": entropy(share), "replaced_share": share,
                         "generator_accuracy": held_out["rtd/generator_accuracy"]})
            print(json.dumps(runs[-1]))
    arms = {f"{optimizer} {start}": {
        "last_block_spread": [r["token_spread_per_block"][-1] for r in runs
                              if (r["optimizer"], r["start"]) == (optimizer, start)],
        "bce_above_base_rate": [r["discriminator_bce"] - r["base_rate_entropy"] for r in runs
                                if (r["optimizer"], r["start"]) == (optimizer, start)]}
        for optimizer, start in ARMS}
    write_results(RESULTS, {"machine": machine(), "settings": vars(args), "arms": arms,
                            "runs": runs}, args.work)


if __name__ == "__main__":
    main()
