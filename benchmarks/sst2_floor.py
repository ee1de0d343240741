"""The bag-of-words floor on SST-2 (`lmlab finetune --baseline bow`'s logistic regression on
word 1-2-gram tf-idf), fitted on the first 4,000 training rows and on all 67,349, scored on the
selection rows the benchmarks carve from training and on the dev set, the test
(benchmarks/splits.py). Nothing is chosen on either split, so both are fair scores.

    python benchmarks/sst2_floor.py [--shared ../shared/data] [--work /tmp/lmlab-sst2-floor]

Writes benchmarks/results/sst2_floor.json.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from record import ROOT, machine, write_results
from splits import sst2_splits

RESULTS = Path(__file__).parent / "results" / "sst2_floor.json"


def main() -> None:
    from lmlab.tasks.bow_floor import floor_of_config
    from lmlab.tasks.finetune_config import FinetuneConfig

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--work", type=Path, default=Path("/tmp/lmlab-sst2-floor"))
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    everything = len((args.shared / "sst2" / "train.tsv").read_text().splitlines()) - 1
    results = {"machine": machine(), "floors": {}}
    sst2 = args.shared / "sst2"
    for rows in (4000, everything):
        if rows < everything:
            train, selection, test = sst2_splits(sst2, args.work, rows)
        else:  # no training rows are left to carve a selection split from
            train, selection, test = sst2 / "train.tsv", None, sst2 / "dev.tsv"
        cfg = FinetuneConfig(task="classify", train=str(train), validation=str(selection or test),
                             test=str(test) if selection else None)
        floor = floor_of_config(cfg)
        if selection is None:  # the one split scored is the test
            floor["test"] = floor.pop("validation")
        results["floors"][str(rows)] = floor
        write_results(RESULTS, results, args.work)
    print(json.dumps(results["floors"], indent=2))


if __name__ == "__main__":
    main()
