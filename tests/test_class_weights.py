"""--class-weights balanced: each label's loss weighed by training rows / (labels × its rows),
scikit-learn's "balanced", so a rare label counts as much as a common one; refused for tasks
without labels."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from lmlab.cli import main
from lmlab.finetune.registry import make_task
from lmlab.finetune.sequence_tasks import balanced_weights
from lmlab.objectives.batch import Batch
from lmlab.tasks.finetune_config import FinetuneConfig
from lmlab.tasks.readers import TextExample


def test_balanced_weights_by_hand():
    # 6 rows, 3 labels: 4 of a, 2 of b, none of c → 6/(3·4) = 0.5, 6/(3·2) = 1, c nothing
    assert balanced_weights([0, 0, 1, 0, 1, 0], 3).tolist() == [0.5, 1.0, 0.0]


def test_the_loss_weighs_each_row_by_its_label():
    cfg = FinetuneConfig(train="t", validation="v", class_weights="balanced")
    train = [TextExample(f"text {i}", None, label, i) for i, label in
             enumerate(["pos", "pos", "pos", "neg"])]
    task = make_task(cfg, ["neg", "pos"], train)
    logits = torch.tensor([[0.2, 1.0], [1.5, -0.5], [0.0, 0.3]])
    labels = torch.tensor([1, 0, 1])
    batch = Batch(input_ids=torch.zeros(3, 2, dtype=torch.long), mask=None, positions=None,
                  targets=None, predict_at={}, extras={"label": labels})
    total, count = task.loss({task.head: logits}, batch).terms[task.name]
    each = F.cross_entropy(logits, labels, reduction="none")
    # neg: 4 / (2 · 1) = 2; pos: 4 / (2 · 3) = 2/3
    assert total.item() == pytest.approx((each * torch.tensor([2 / 3, 2.0, 2 / 3])).sum().item())
    assert count.item() == 3
    unweighted = make_task(FinetuneConfig(train="t", validation="v"), ["neg", "pos"], train)
    assert unweighted.label_weights is None


def test_class_weights_belong_to_tasks_with_labels():
    with pytest.raises(ValueError, match="class_weights weighs labels: it is for classify and "
                                         "pairs, not regress"):
        FinetuneConfig(train="t", validation="v", task="regress", class_weights="balanced")


def test_fine_tuning_with_balanced_weights_records_them(tmp_path, capsys):
    from lmlab.export.importer import import_hf
    from tests.test_hf_import import saved_bert

    saved_bert(tmp_path / "hf", class_name="BertModel")
    run = import_hf(tmp_path / "hf", tmp_path / "bert").out
    data = tmp_path / "imbalanced.tsv"
    data.write_text("label\ttext\n" + "".join(f"{'rare' if i % 8 == 0 else 'common'}\ttext {i}\n"
                                              for i in range(16)))
    assert main(["finetune", str(run), "--train", str(data), "--validation", str(data),
                 "--out", str(tmp_path / "ft"), "--steps", "1", "--batch-size", "8",
                 "--class-weights", "balanced"]) == 0
    saved = json.loads((tmp_path / "ft" / "config.json").read_text())
    assert saved["train"]["class_weights"] == "balanced"


def test_distillation_refuses_class_weights_it_would_not_use():
    from lmlab.distill.config import DistillConfig

    with pytest.raises(ValueError, match="--class-weights is for lmlab finetune"):
        DistillConfig(train="t", validation="v", layers=2, class_weights="balanced")
