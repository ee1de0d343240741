import pytest

from lmlab.model import LanguageModel
from lmlab.objectives import SpecialTokens
from lmlab.objectives.registry import build_objective
from lmlab.presets import preset
from lmlab.train import pretrain as pretraining
from lmlab.train.budget import parse_count, step_budget, steps_in_minutes
from lmlab.train.config import TrainConfig


def test_counts_and_budgets():
    assert parse_count("20M") == 20_000_000 and parse_count("1.5k") == 1500
    assert parse_count("4096") == 4096
    assert step_budget(100, None, 10**6, 4096) == 100
    assert step_budget(None, "chinchilla", 10**6, 4096) == 4883  # ceil(2e7 / 4096)
    assert step_budget(100, "1M", 0, 4096) == 100  # the smaller budget wins
    assert step_budget(None, None, 10**6, 4096) is None
    assert steps_in_minutes(2, 0.5) == 240


def test_unreadable_count():
    with pytest.raises(ValueError, match="cannot read 'lots' as a token count"):
        parse_count("lots")


@pytest.mark.parametrize("objective", ["mlm", "clm", "mlm+nsp", "mix:clm=1,mlm=15", "span"])
@pytest.mark.parametrize("specials_first", [True, False])  # lmlab's layout, and a tokenizer's
def test_a_minutes_budget_times_the_step_training_runs(objective, specials_first, monkeypatch):
    """The timing step is the objective's own batch and fused loss (a sparse MLM head is
    timed as sparse) on a micro-batch, and leaves no gradient behind."""
    special = SpecialTokens.layout(300, n_sentinels=20) if specials_first else SpecialTokens(
        300, pad=299, unk=298, cls=297, sep=296, mask=295, bos=294, eos=293,
        sentinels=tuple(range(273, 293)))
    built = build_objective(objective, special)
    model = LanguageModel(preset("bert-tiny", 300, 32), heads=built.heads)
    cfg = TrainConfig(objective=objective, seq_len=32, minutes=1.0)
    rows = []
    original = built.make_batch
    monkeypatch.setattr(built, "make_batch",
                        lambda ids, *a: rows.append(len(ids)) or original(ids, *a))
    steps = pretraining._total_steps(cfg, model, built, special, micro_size=2, accumulation=4)
    assert rows == [2, 2]  # timed twice, on one micro-batch
    assert steps >= 1
    assert all(p.grad is None for p in model.parameters())
