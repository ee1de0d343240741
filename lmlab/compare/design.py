"""The design of a comparison: which objectives, on what, for how much (the sub-runs that make
it up: lmlab.compare.arms).

Every arm starts from the same weights: --model's, drawn at random, or with `init` a run's
(each arm continues it as `lmlab pretrain --init` does). Beside an --init run's adaptations
stands the control, CONTROL: the run as it came, trained for no steps, probed and scored as
the others are; every adaptation is judged against it.

Every objective trains the same backbone with the same tokenizer, data order (pre-training
seed k shares its shuffle across objectives), context, batch and schedule shape. What is held
equal between them is `match`: training FLOPs by default, counted with each objective's own
share of positions that run the vocabulary projection, so an objective whose steps cost less
gets more of them; or tokens, steps or minutes. Each budget fraction is a run of its own with
its schedule stretched to fit, not an early checkpoint of a longer run.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from lmlab.config.budget import parse_count
from lmlab.config.objective_options import CONTROL, ObjectiveOptions
from lmlab.config.parsing import check_field
from lmlab.config.training import muon_runs_with
from lmlab.extras import require_extra, require_trackers
from lmlab.tasks.named import NamedTask

if TYPE_CHECKING:  # the command line reads MATCHES without importing torch
    from lmlab.config.objective_options import ObjectiveOptions

Match = Literal["flops", "tokens", "steps", "time"]
MATCHES: tuple[str, ...] = ("flops", "tokens", "steps", "time")
BUDGET_UNITS = {"flops": "training FLOPs", "tokens": "training tokens", "steps": "steps",
                "time": "minutes"}
CLUSTERS: tuple[str, ...] = ("local", "ray")  # where sub-runs train (lmlab.compare.cluster)
DEFAULT_MODEL = "modern-mini"


@dataclass(frozen=True)
class CompareConfig:
    objectives: tuple[str, ...]
    budget: str  # in the unit of `match`: FLOPs (1e15), tokens (20M), steps or minutes
    data: str | None = None  # a prepared dataset; None = the built-in corpus
    match: Match = "flops"
    fractions: tuple[float, ...] = (0.25, 0.5, 1.0)
    seeds: int = 3
    model: str = DEFAULT_MODEL
    init: str | None = None  # a run every arm continues (RUN or RUN:CHECKPOINT), with its model
    seq_len: int = 128
    batch_size: int = 32
    lr: float | None = None  # None: lmlab pretrain's default
    # one optimizer for every objective, so that only the objective differs (pretrain's auto
    # would give masked objectives AdamW and the rest Muon)
    optimizer: str = "muon"
    precision: str = "fp32"
    # pretrain's objective options (ObjectiveOptions' fields, or an ObjectiveOptions), the same
    # for every objective; kept as those that differ from the defaults, None if none do (and a
    # design.json written before they could be given reads alike)
    objective_options: Mapping[str, Any] | ObjectiveOptions | None = None
    probes: tuple[NamedTask, ...] = ()
    probe_seeds: int = 1
    probe_epochs: float = 3.0
    probe_lr: float | None = None  # None: lmlab finetune's default
    pairs: tuple[str, ...] = ()  # minimal-pair (BLiMP-format) files or directories
    eval_tokens: int = 100_000  # held-out tokens scored for bits per byte
    out: str = "runs/compare"
    workers: int = 1  # --cluster local: sub-runs trained side by side
    report_to: str | None = None  # trackers every sub-run's trainings report to
    cluster: str = "local"
    cpus_per_run: int = 1  # --cluster ray: what each sub-run's task holds on its node
    gpus_per_run: int = 0

    def __post_init__(self) -> None:
        if self.match not in MATCHES:
            raise ValueError(f"--match must be one of {', '.join(MATCHES)}; got {self.match!r}")
        if len(set(self.objectives)) != len(self.objectives) or len(self.objectives) < 2:
            raise ValueError(f"compare needs two or more different objectives; got "
                             f"{', '.join(self.objectives) or 'none'}")
        if CONTROL in self.objectives and self.init is None:
            raise ValueError(f"the objective {CONTROL} is the control of a comparison of "
                             f"adaptations (a run as it came, trained for nothing): give "
                             f"--init RUN, or leave {CONTROL} out")
        if self.init is not None and self.model != DEFAULT_MODEL:
            raise ValueError(f"--init takes the model from {self.init}; leave out --model")
        if not self.fractions or any(not 0 < f <= 1 for f in self.fractions):
            raise ValueError(f"budget fractions must lie in (0, 1]; got {self.fractions}")
        for name in ("seeds", "probe_seeds", "workers", "eval_tokens", "seq_len",
                     "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be at least 1, got "
                                 f"{getattr(self, name)}")
        rates = [rate for rate in (self.lr, self.probe_lr) if rate is not None]
        if not all(rate > 0 for rate in rates) or not self.probe_epochs > 0:
            raise ValueError("--lr, --probe-lr and --probe-epochs must be positive")
        if self.optimizer not in ("adamw", "muon"):
            raise ValueError(f"--optimizer must be adamw or muon; got {self.optimizer!r}")
        if not muon_runs_with("ddp", self.precision) and self.optimizer == "muon":
            raise ValueError(f"--optimizer muon does not run with --precision "
                             f"{self.precision}; use --optimizer adamw")
        if len({label(spec) for spec in self.objectives}) != len(self.objectives):
            raise ValueError(f"objectives {', '.join(self.objectives)} share a directory name")
        for path in self.pairs:
            if not Path(path).exists():
                raise ValueError(f"minimal pairs: {path} does not exist")
        if len({probe.name for probe in self.probes}) != len(self.probes):
            raise ValueError("two probes share a name")
        object.__setattr__(self, "objective_options", _changed_options(self.objective_options))
        self.objective_settings  # noqa: B018 — objective options that do not hold fail here too
        self.amount  # noqa: B018 — a budget that does not parse fails here, before any run
        require_trackers(self.report_to)
        self._check_cluster()

    def _check_cluster(self) -> None:
        if self.cluster not in CLUSTERS:
            raise ValueError(f"--cluster must be one of {', '.join(CLUSTERS)}; got "
                             f"{self.cluster!r}")
        if self.cpus_per_run < 1 or self.gpus_per_run < 0:
            raise ValueError(f"--cpus-per-run must be at least 1 and --gpus-per-run at least "
                             f"0; got {self.cpus_per_run} and {self.gpus_per_run}")
        if self.cluster == "local":
            if (self.cpus_per_run, self.gpus_per_run) != (1, 0):
                raise ValueError("--cpus-per-run and --gpus-per-run are what each sub-run asks "
                                 "of a Ray cluster: add --cluster ray (on this machine, "
                                 "--workers N trains N side by side)")
            return
        if self.workers != 1:
            raise ValueError("--workers is for --cluster local; on Ray, --cpus-per-run and "
                             "--gpus-per-run decide how many sub-runs train at once")
        if self.gpus_per_run > 1 and self.batch_size % self.gpus_per_run:
            raise ValueError(f"--batch-size {self.batch_size} does not split evenly over "
                             f"--gpus-per-run {self.gpus_per_run} ranks")
        require_extra("ray", "ray", "--cluster ray")

    @property
    def objective_settings(self) -> ObjectiveOptions:
        """The objective options every sub-run pre-trains with."""
        given = dict(self.objective_options or {})
        for name in given:
            check_field(name, ObjectiveOptions)
        return ObjectiveOptions(**given)

    @property
    def amount(self) -> float:
        """The budget as a number in the unit of `match`."""
        text = str(self.budget).strip()
        try:
            amount = float(parse_count(text)) if self.match == "tokens" else float(text)
        except ValueError:
            raise ValueError(f"--budget {text!r} is not a number of "
                             f"{BUDGET_UNITS[self.match]}") from None
        if not amount > 0:
            raise ValueError(f"--budget must be positive, got {text}")
        return amount

    @classmethod
    def of(cls, objectives: str | list[str], **fields) -> CompareConfig:
        """From Python or the command line: objectives as one comma list or a list of specs;
        probes as NAME=TASK:... strings or NamedTask records."""
        # the registry loads torch, and the command line builds its parser from this module
        from lmlab.objectives.registry import split_specs

        specs = split_specs(objectives) if isinstance(objectives, str) else list(objectives)
        probes = tuple(p if isinstance(p, NamedTask) else NamedTask.read(p)
                       for p in fields.pop("probes", ()) or ())
        minimal_pairs = fields.pop("pairs", ()) or ()
        if isinstance(minimal_pairs, str | Path):
            minimal_pairs = (minimal_pairs,)
        fractions = fields.pop("fractions", None)
        if isinstance(fractions, str):
            fractions = tuple(_fraction(f) for f in fractions.split(","))
        extra = {"fractions": tuple(fractions)} if fractions is not None else {}
        return cls(tuple(specs), probes=probes, pairs=tuple(map(str, minimal_pairs)), **extra,
                   **{k: v for k, v in fields.items() if v is not None})


def _changed_options(given: Mapping[str, Any] | ObjectiveOptions | None) -> dict | None:
    """Only the options that differ from their defaults (None if none do): a design given
    them spelled out is the same design, and continues a comparison begun without them."""
    defaults = vars(ObjectiveOptions())
    if isinstance(given, ObjectiveOptions):
        given = vars(given)
    changed = {name: value for name, value in (given or {}).items()
               if name not in defaults or value != defaults[name]}  # unknown: refused later
    return changed or None


def _fraction(text: str) -> float:
    """1/4, 0.25 or 25%."""
    text = text.strip()
    try:
        if text.endswith("%"):
            return float(text[:-1]) / 100
        top, _, bottom = text.partition("/")
        return float(top) / float(bottom) if bottom else float(top)
    except (ValueError, ZeroDivisionError):
        raise ValueError(f"budget fraction {text!r} is not a number such as 0.25, 1/4 or "
                         f"25%") from None


def label(spec: str) -> str:
    """A directory name for an objective spec: mix:clm=1,mlm=15 → mix-clm-1-mlm-15."""
    return re.sub(r"[^A-Za-z0-9]+", "-", spec).strip("-")


def judged_pairs(objectives: tuple[str, ...]) -> list[tuple[str, str]]:
    """Every pair of arms to judge: each against CONTROL first, the control always second (so
    that "A better" reads "A helps"), then the others in the order given."""
    pairs = [(b, a) if a == CONTROL else (a, b) for a, b in itertools.combinations(objectives, 2)]
    return sorted(pairs, key=lambda pair: pair[1] != CONTROL)
