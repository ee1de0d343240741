"""The splits every benchmark fine-tunes on, so that the split reported as the test chose
nothing: the best checkpoint is picked on a selection split carved out of the task's training
rows (seeded), and the public held-out set is scored once, as the test.

- SST-2: its test labels are hidden, so its 872 dev rows are the test. The selection split is
  SELECTION_ROWS rows drawn (seeded) from the training rows after the first `train_rows`, which
  stay the training rows, as in earlier results.
- XQuAD (a SQuAD v1.1 dev subset, 48 articles): the last 20% of articles are the test, as before;
  a seeded tenth of the remaining articles is the selection split, the rest trains. Split by
  article, so no passage is in two splits.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

SELECTION_ROWS = 872  # as many as SST-2's dev set, the test it stands in for
SEED = 0


def sst2_splits(sst2: Path, work: Path, train_rows: int,
                seed: int = SEED) -> tuple[Path, Path, Path]:
    """(train, selection, test) files for SST-2: its first `train_rows` training rows, a seeded
    sample of the others, and its dev set."""
    header, *rows = (sst2 / "train.tsv").read_text(encoding="utf-8").splitlines(keepends=True)
    rest = rows[train_rows:]
    chosen = sorted(random.Random(seed).sample(range(len(rest)), SELECTION_ROWS))
    train, selection = work / "sst2-train.tsv", work / "sst2-selection.tsv"
    train.write_text(header + "".join(rows[:train_rows]), encoding="utf-8")
    selection.write_text(header + "".join(rest[index] for index in chosen), encoding="utf-8")
    return train, selection, sst2 / "dev.tsv"


def xquad_splits(source: Path, work: Path, seed: int = SEED) -> tuple[Path, Path, Path]:
    """(train, selection, test) SQuAD files from XQuAD, split by article."""
    data = json.loads(source.read_text(encoding="utf-8"))
    articles = data["data"]
    cut = int(len(articles) * 0.8)
    training, test = articles[:cut], articles[cut:]
    picked = set(random.Random(seed).sample(range(len(training)), max(1, len(training) // 10)))
    parts = {"train": [a for i, a in enumerate(training) if i not in picked],
             "selection": [a for i, a in enumerate(training) if i in picked], "test": test}
    paths = []
    for name, part in parts.items():
        path = work / f"xquad-{name}.json"
        path.write_text(json.dumps({"version": data.get("version", "1.1"), "data": part}),
                        encoding="utf-8")
        paths.append(path)
    return paths[0], paths[1], paths[2]
