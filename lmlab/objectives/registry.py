"""Objective specs as users write them, e.g. `mlm`, `mlm+nsp`, `mix:clm=1,mlm=15`,
`alternate:clm,mlm@1000`, `then:clm,mlm@0.75`, turned into Objective instances: the one
name → class table; and the check a pre-training config's objective (with its preset and
trackers) passes before any data is prepared."""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor

from lmlab.config.objective_options import ObjectiveOptions
from lmlab.config.presets import preset
from lmlab.config.training import TrainConfig
from lmlab.data.special_tokens import SpecialTokens
from lmlab.extras import require_trackers
from lmlab.objectives.base import Objective
from lmlab.objectives.clm import CausalLM
from lmlab.objectives.mixture import Alternating, Mixture
from lmlab.objectives.mlm import LinearRate, MaskedLM, StagedRate
from lmlab.objectives.nsp import MaskedLMWithNSP
from lmlab.objectives.prefix_lm import PrefixLM
from lmlab.objectives.rtd import ReplacedTokenDetection, Sampling
from lmlab.objectives.sequence import Then
from lmlab.objectives.span_corruption import SpanCorruption


def _masked(special, options, word_starts, total_steps, next_token=False) -> MaskedLM:
    rate = options.mlm_rate
    if options.mlm_rate_start is not None:
        rate = LinearRate(options.mlm_rate_start, options.mlm_rate, total_steps)
    if options.mlm_rates is not None:
        rate = StagedRate(options.mlm_rates, total_steps)
    return MaskedLM(special, rate=rate, mask_prob=options.mask_prob,
                    random_prob=options.random_prob, selection=options.mlm_selection,
                    whole_word=options.whole_word, word_start_table=word_starts,
                    next_token=next_token)


BASE_OBJECTIVES: dict[str, Callable[..., Objective]] = {
    "mlm": _masked,
    "mntp": lambda *args: _masked(*args, next_token=True),  # masked next-token (GPT-BERT)
    "clm": lambda special, options, *_: CausalLM(special),
    "prefix": lambda special, options, *_: PrefixLM(special, options.prefix_len),
    "span": lambda special, options, *_: SpanCorruption(
        special, options.span_noise_density, options.span_mean_length),
    "mlm+nsp": lambda *args: MaskedLMWithNSP(_masked(*args)),
    "rtd": lambda *args: ReplacedTokenDetection(
        _masked(*args), args[1].rtd_weight, args[1].rtd_generator, args[1].rtd_sharing,
        Sampling(args[1].rtd_temperature, args[1].rtd_disallow_correct)),
}


# Each way of combining objectives: its form as help shows it, and a spec that runs (for the
# end-to-end tests, which drive every objective the registry builds through every command).
COMPOSITES = {
    "mix": ("mix:A=w,B=w", "mix:clm=1,mlm=15"),
    "alternate": ("alternate:A,B@steps", "alternate:span,prefix@1"),
    "then": ("then:A,B@fraction", "then:clm,mlm@0.5"),
}


def objective_names() -> list[str]:
    return [*BASE_OBJECTIVES, *(form for form, _ in COMPOSITES.values())]


def example_specs() -> list[str]:
    """One runnable spec of every objective the registry builds, composites included."""
    return [*BASE_OBJECTIVES, *(example for _, example in COMPOSITES.values())]


def _base(name: str, special, options, word_starts, total_steps) -> Objective:
    if name not in BASE_OBJECTIVES:
        raise ValueError(f"unknown objective {name!r}; choose from "
                         f"{', '.join(objective_names())}")
    return BASE_OBJECTIVES[name](special, options, word_starts, total_steps)


def build_objective(spec: str, special: SpecialTokens, options: ObjectiveOptions | None = None,
                    word_starts: Tensor | None = None,
                    total_steps: int | None = None) -> Objective:
    """`mlm` | `clm` | `prefix` | `span` | `mlm+nsp` | `mntp` | `rtd` | `mix:clm=1,mlm=15` |
    `alternate:clm,mlm@1000` (switch every 1000 steps) | `then:clm,mlm@0.75` (clm for the
    first 75% of the run's steps, then mlm). A masking-rate schedule runs over
    `total_steps`, or, when None, over the run the objective is later fixed to (`for_run`)."""
    options = options or ObjectiveOptions()
    build = lambda name: _part(_base(name.strip(), special, options, word_starts,  # noqa: E731
                                     total_steps), spec)
    kind, _, rest = spec.partition(":")
    if kind == "mix" and rest:
        names, weights = [], []
        for part in rest.split(","):
            name, _, weight = part.partition("=")
            try:
                weights.append(float(weight) if weight else 1.0)
            except ValueError:
                raise ValueError(f"mixture weight {weight!r} of {name!r} is not a number") from None
            names.append(name)
        return Mixture([build(n) for n in names], weights)
    if kind == "alternate" and rest:
        names, _, every = rest.partition("@")
        if not every.isdigit() or int(every) < 1:
            raise ValueError(f"alternation needs '@STEPS' with STEPS >= 1, as in "
                             f"'alternate:clm,mlm@1000'; got {spec!r}")
        return Alternating([build(n) for n in names.split(",")], int(every))
    if kind == "then" and rest:
        names, _, fraction = rest.partition("@")
        return Then([build(n) for n in names.split(",")], _switch_fraction(fraction, spec))
    return build(spec)


def _part(objective: Objective, spec: str) -> Objective:
    """`objective` as a part of `spec`; one that runs a generator first needs a step alone."""
    if objective.two_passes and ":" in spec:
        raise ValueError(f"{objective.title} runs its generator before the model in each "
                         f"step, so it cannot share steps with another objective ({spec!r})")
    return objective


def _switch_fraction(text: str, spec: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"a sequence needs '@FRACTION', the share of the run's steps the "
                         f"first objective trains, as in 'then:clm,mlm@0.75'; got {spec!r}"
                         ) from None


def split_specs(text: str) -> list[str]:
    """A comma-separated list of specs, where a composite keeps its own commas:
    `mlm,clm,mix:clm=1,mlm=15` → [mlm, clm, mix:clm=1,mlm=15]. A part continues the
    mixture before it while it is a `name=weight`, an alternation or sequence before it until
    its `@`."""
    specs: list[str] = []
    for part in (piece.strip() for piece in text.split(",")):
        if specs and ":" not in part and _still_open(specs[-1], part):
            specs[-1] += f",{part}"
        elif part:
            specs.append(part)
    if not specs:
        raise ValueError(f"no objectives in {text!r}")
    return specs


def _still_open(spec: str, part: str) -> bool:
    kind, _, rest = spec.partition(":")
    if kind == "mix" and rest:
        return "=" in part
    return kind in ("alternate", "then") and bool(rest) and "@" not in rest


def check_before_data(config: TrainConfig) -> None:
    """Catch a bad objective, preset or tracker before minutes are spent preparing data: the
    objective built on a stand-in vocabulary, the preset at a stand-in size."""
    require_trackers(config.report_to)
    build_objective(config.objective, SpecialTokens.layout(1024, 100), config.objective_options)
    if config.model != "auto":
        preset(config.model, vocab_size=1024)
