"""Attention and pooling are what a fine-tuning run says they are.

A tiny model is trained here on rows `[CLS] w1 .. wn x [SEP]` whose label is decided by the last
text token x alone (the w's are drawn from the same tokens). Under bidirectional attention
[CLS] sees x, and pooling the first position solves the task; under causal attention [CLS]
sees only itself, so the same pooling stays at chance, while pooling the last token ([SEP],
which has seen the whole row) solves it again. Were the mask kind ignored, causal [CLS]
pooling would solve it; were causal attention applied to the bidirectional run, or the last
token pooled at the wrong place (padding, the first token), a solved case would stay at chance.
The default `Reading` follows pre-training, and the run's resolved config records it.
"""

import copy
from types import SimpleNamespace

import pytest
import torch

from lmlab.config.presets import preset
from lmlab.finetune.base import Row, resolve_reading
from lmlab.finetune.data import TaskData
from lmlab.finetune.entry import Splits, resolved
from lmlab.finetune.outputs import row_outputs
from lmlab.finetune.sequence_tasks import ClassifyTask
from lmlab.model.heads import make_head
from lmlab.model.model import LanguageModel
from lmlab.objectives import SpecialTokens
from lmlab.objectives.registry import build_objective
from lmlab.runs.schema import Reading
from lmlab.tasks.finetune_config import FinetuneConfig

SPECIAL = SpecialTokens.layout(vocab_size=32)
ORDINARY = list(range(max(SPECIAL.all_ids) + 1, SPECIAL.vocab_size))
DECIDING = (ORDINARY[:6], ORDINARY[6:12])  # a last token from the first set = label 0
CFG = FinetuneConfig(train="unused", validation="unused")
STEPS, BATCH = 150, 32


def last_token_rows(count: int, seed: int) -> list[Row]:
    """Balanced rows of 4–7 random ordinary tokens, then the deciding token, then [SEP]."""
    generator = torch.Generator().manual_seed(seed)

    def pick(tokens: list[int], n: int) -> list[int]:
        return [tokens[i] for i in torch.randint(len(tokens), (n,), generator=generator)]

    rows = []
    for index in range(count):
        label = index % 2
        length = int(torch.randint(4, 8, (), generator=generator))
        ids = [SPECIAL.cls, *pick(ORDINARY, length), *pick(DECIDING[label], 1), SPECIAL.sep]
        rows.append(Row(ids, [0] * len(ids), index, label))
    return rows


@pytest.fixture(scope="module")
def setting():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    cfg = preset("bert-tiny", SPECIAL.vocab_size, max_seq_len=16, d_model=32, dropout=0.0)
    initial = LanguageModel(cfg, heads={"classify": make_head("classify", cfg, num_labels=2)})
    yield initial, last_token_rows(512, seed=1), last_token_rows(256, seed=2)
    torch.set_num_threads(threads)


@pytest.mark.parametrize(("attention", "pooling", "solved"), [
    ("bidirectional", "cls", True), ("causal", "cls", False), ("causal", "last", True)])
def test_what_the_pooled_position_sees_decides_the_task(setting, attention, pooling, solved):
    initial, train, held_out = setting
    model, task = copy.deepcopy(initial), ClassifyTask(CFG, ["a", "b"])
    reading = Reading(attention, pooling)
    data = TaskData(task, train, reading, token_types=True, batch_size=BATCH, micro_size=BATCH,
                    seed=0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
    for step in range(STEPS):
        (batch,) = data.micro_batches(step, torch.Generator())
        optimizer.zero_grad()
        task.loss(model(**batch.model_inputs()), batch).mean().backward()
        optimizer.step()
    scores = row_outputs(model, task, held_out, reading, token_types=True)
    right = [int(s.argmax()) == row.target for s, row in zip(scores, held_out, strict=True)]
    accuracy = sum(right) / len(right)
    assert accuracy >= 0.9 if solved else accuracy <= 0.65, accuracy


@pytest.mark.parametrize(("objective", "attention", "pooling"), [
    ("clm", "causal", "last"), ("mlm", "bidirectional", "mean"),
    ("mlm+nsp", "bidirectional", "cls"), ("prefix", "bidirectional", "mean"),
    ("mix:clm=1,mlm=1", "bidirectional", "mean")])
def test_the_default_reading_follows_pretraining_and_is_recorded(objective, attention,
                                                                  pooling):
    pretrained = SimpleNamespace(objective=build_objective(objective, SPECIAL), max_seq_len=16,
                                 config=SimpleNamespace(embedding=None),
                                 model=SimpleNamespace(cfg=SimpleNamespace(dropout=0.0,
                                                                           d_model=256)))
    assert resolve_reading(pretrained.objective, "auto", "auto") == Reading(attention, pooling)
    recorded = resolved(CFG, pretrained, Splits([], [], None))
    assert (recorded.attention, recorded.pooling) == (attention, pooling)
    assert recorded.lr == pytest.approx(3e-4)  # 1e-4 × 768 / 256, recorded as used
    # An explicit choice wins; pooling left to `auto` follows the attention chosen.
    assert resolve_reading(pretrained.objective, "causal", "auto") == Reading("causal", "last")
