"""The objective's plan for a pre-training run: the preset `auto` stands for, the packing, the
pad id, the heads and the validation objectives, worked out without data or weights."""

import pytest

from lmlab.config.objective_options import ObjectiveOptions
from lmlab.config.training import TrainConfig
from lmlab.objectives import SpecialTokens
from lmlab.objectives.mlm import EVAL_MASK_RATE, MaskedLM
from lmlab.objectives.registry import build_objective
from lmlab.train.objective_plan import plan_objective

SPECIAL = SpecialTokens.layout(300, n_sentinels=20)
GPT2_LIKE = SpecialTokens(300, pad=299, bos=299, eos=299)  # one id for every role, no [PAD]


def plan(spec, special=SPECIAL, options=None, **fields):
    options = options or ObjectiveOptions()
    cfg = TrainConfig(objective=spec, objective_options=options, **fields)
    return plan_objective(build_objective(spec, special, options), cfg, special)


@pytest.mark.parametrize("spec, preset, heads", [
    ("mlm", "modernbert-mini", ("mlm",)),  # reads only bidirectionally
    ("clm", "modern-mini", ("lm",)),
    ("mix:clm=1,mlm=15", "modern-mini", ("lm", "mlm")),
])
def test_auto_is_the_mini_size_of_the_objectives_family_and_heads_are_its_own(spec, preset,
                                                                               heads):
    found = plan(spec)
    assert found.preset == preset and sorted(found.heads) == sorted(heads)
    assert plan(spec, model="bert-tiny").preset == "bert-tiny"


def test_packing_is_asked_unless_the_objective_needs_sentences():
    assert plan("clm").packing == "concatenate"
    assert plan("clm", packing="best_fit").packing == "best_fit"
    nsp = plan("mlm+nsp", packing="best_fit")
    assert (nsp.packing, nsp.heads) == ("sentences", ("mlm", "nsp"))


def test_blocks_pad_with_pad_or_need_none_when_concatenated_without_one():
    assert plan("clm").pad_id == SPECIAL.pad
    assert plan("clm", special=GPT2_LIKE).pad_id == GPT2_LIKE.padding_id  # never written
    with pytest.raises(ValueError, match="pad"):
        plan("clm", special=GPT2_LIKE, packing="best_fit")  # padded rows need a [PAD]


def test_validation_scores_each_plain_objective_once_at_the_fixed_masking():
    objectives = plan("mix:clm=1,mlm=15", options=ObjectiveOptions(mlm_rate=0.4)).eval_objectives
    assert sorted(objectives) == ["clm", "mlm"]
    assert isinstance(objectives["mlm"], MaskedLM) and objectives["mlm"].rate == EVAL_MASK_RATE
