"""Objective specs as written on the command line."""

import pytest

from lmlab.config.objective_options import ObjectiveOptions
from lmlab.objectives import (
    Alternating,
    CausalLM,
    LinearRate,
    MaskedLM,
    MaskedLMWithNSP,
    Mixture,
    PrefixLM,
    SpanCorruption,
)
from lmlab.objectives.registry import build_objective


@pytest.mark.parametrize("spec,kind", [
    ("mlm", MaskedLM), ("clm", CausalLM), ("prefix", PrefixLM), ("span", SpanCorruption),
    ("mlm+nsp", MaskedLMWithNSP), ("mntp", MaskedLM),
])
def test_base_objectives(special, spec, kind):
    assert type(build_objective(spec, special)) is kind


def test_mixture_and_alternation(special):
    mix = build_objective("mix:clm=1,mlm=15", special)
    assert isinstance(mix, Mixture) and mix.weights == [1.0, 15.0]
    assert [type(o) for o in mix.objectives] == [CausalLM, MaskedLM]
    alternate = build_objective("alternate:clm,mlm@1000", special)
    assert isinstance(alternate, Alternating) and alternate.every_steps == 1000


def test_options_reach_the_objectives(special):
    options = ObjectiveOptions(mlm_rate=0.15, mlm_rate_start=0.3, span_noise_density=0.5)
    mlm = build_objective("mlm", special, options, total_steps=100)
    assert isinstance(mlm.rate, LinearRate) and mlm.rate_at(0) == 0.3
    assert build_objective("span", special, options).noise_density == 0.5
    assert build_objective("mntp", special).heads == ("lm",)


@pytest.mark.parametrize("spec,message", [
    ("bert", "unknown objective 'bert'; choose from mlm, mntp, clm"),
    ("mix:clm=a", "mixture weight 'a' of 'clm' is not a number"),
    ("alternate:clm,mlm", "alternation needs '@STEPS'"),
    ("mix:clm=1,mlm+nsp=1", "mlm+nsp needs whole-sentence rows, so it cannot be mixed"),
])
def test_bad_specs_are_clear_errors(special, spec, message):
    with pytest.raises(ValueError, match=message.replace("+", r"\+")):
        build_objective(spec, special)
