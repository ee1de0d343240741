"""From the sub-runs' item scores to the comparison's answer: a table of each objective's
score per measure and budget, a verdict for every pair of objectives on every measure they
share at the full budget (paired hierarchical bootstrap, Holm across all of them), and where
along the budgets one objective overtakes another."""

from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass

import numpy as np

from lmlab.compare.arms import SubRun
from lmlab.compare.design import CONTROL, CompareConfig, judged_pairs
from lmlab.compare.measures import measure_of
from lmlab.compare.phases import too_short
from lmlab.compare.stats import Verdict, holm, paired_bootstrap, verdict
from lmlab.compare.subrun import read_ledger, read_scores


@dataclass(frozen=True)
class ArmScore:
    """One objective's score on one measure at one budget fraction, over its seeds."""

    measure: str
    objective: str
    fraction: float
    flops: float  # mean over seeds
    mean: float
    seed_std: float  # sample standard deviation of the pre-training seeds' means
    seed_means: tuple[float, ...]


@dataclass(frozen=True)
class ObjectivePairVerdict:
    """The verdict on two of the compared objectives, a against b, on one measure."""

    a: str
    b: str
    verdict: Verdict
    unmeasured: str | None = None  # why no side is named: a phase too short (phases.py)

    @property
    def says(self) -> str:
        return "no verdict" if self.unmeasured else self.verdict.says

    @property
    def text(self) -> str:
        return self.unmeasured or self.verdict.text

    @property
    def against_control(self) -> bool:
        return self.b == CONTROL  # judged_pairs puts the control second

    @property
    def effect(self) -> str:
        """Against the control, what the adaptation `a` did: helps, hurts, or the verdict's
        own words where it named no side."""
        return {f"{self.a} better": "helps", f"{self.b} better": "hurts"}.get(self.says,
                                                                           self.says)

    @property
    def line(self) -> str:
        judged = (f"{self.a} {self.effect}: {self.text}"
                  if self.against_control and self.effect in ("helps", "hurts") else self.text)
        return f"{self.verdict.measure}: {self.a} vs {self.b}: {judged}"

    def to_dict(self) -> dict:
        d = self.verdict.difference
        effect = {"effect": self.effect} if self.against_control else {}
        return {"measure": self.verdict.measure, "a": self.a, "b": self.b,
                "says": self.says, **effect, "text": self.text,
                "adjusted_p": self.verdict.adjusted_p, **asdict(d)}


@dataclass(frozen=True)
class Crossover:
    measure: str
    a: str
    b: str
    flops: float  # where the advantage of a over b changes sign (log-linear interpolation)
    before: str  # the objective ahead at the smaller budget


@dataclass
class Analysis:
    scores: dict[tuple[str, str, float], np.ndarray]  # (measure, objective, fraction) → K×F×N
    ledger: list[dict]
    rows: list[ArmScore]
    verdicts: list[ObjectivePairVerdict]
    crossovers: list[Crossover]
    apart: list[str]  # one sentence per pair of objectives that share no measure

    @property
    def verdict_lines(self) -> list[str]:
        """The answer in a few lines: each verdict (against the control first), then why a
        pair has none."""
        return [p.line for p in self.verdicts] + self.apart


def collect(cfg: CompareConfig, subs: list[SubRun]) -> tuple[dict, list[dict]]:
    """(measure, objective, fraction) → item scores stacked over seeds (K, F, N); the ledger."""
    grouped: dict[tuple[str, str, float], list[np.ndarray]] = {}
    for sub in sorted(subs, key=lambda s: (s.objective, s.fraction, s.seed)):
        for measure, values in read_scores(sub).items():
            grouped.setdefault((measure, sub.objective, sub.fraction), []).append(values)
    return ({key: np.stack(values) for key, values in grouped.items()},
            [read_ledger(sub) for sub in subs])


def analyse(cfg: CompareConfig, subs: list[SubRun], resamples: int = 2000) -> Analysis:
    scores, ledger = collect(cfg, subs)
    flops = {}
    for entry in ledger:
        flops.setdefault((entry["objective"], entry["fraction"]), []).append(entry["flops"])
    rows = []
    for (measure, objective, fraction), values in sorted(scores.items()):
        seed_means = values.mean(axis=(1, 2))
        rows.append(ArmScore(measure, objective, fraction,
                        float(np.mean(flops[objective, fraction])), float(values.mean()),
                        float(seed_means.std(ddof=1)) if len(seed_means) > 1 else 0.0,
                        tuple(map(float, seed_means))))
    full = max(cfg.fractions)
    differences = []
    for measure in sorted({key[0] for key in scores}):
        for a, b in judged_pairs(cfg.objectives):
            if (measure, a, full) in scores and (measure, b, full) in scores:
                differences.append((measure, a, b, paired_bootstrap(
                    scores[measure, a, full], scores[measure, b, full], resamples,
                    higher_is_better=measure_of(measure).higher_is_better)))
    adjusted = holm([d.p_value for *_, d in differences]) if differences else []
    unmeasured = too_short(ledger, full)
    verdicts = sorted((ObjectivePairVerdict(a, b, verdict(measure, d, p, (a, b)),
                                            unmeasured.get(a) or unmeasured.get(b))
                       for (measure, a, b, d), p in zip(differences, adjusted, strict=True)),
                      key=lambda v: not v.against_control)  # against the control first
    return Analysis(scores, ledger, rows, verdicts, _crossovers(rows, cfg),
                    _apart(cfg, scores))


def _apart(cfg: CompareConfig, scores: dict) -> list[str]:
    """Why a pair of objectives gets no verdict: each is scored only the ways it allows (a
    pseudo-likelihood is never ranked against a true one), and these share none of them."""
    full = max(cfg.fractions)
    measures = {objective: sorted(m for m, o, f in scores if o == objective and f == full)
                for objective in cfg.objectives}
    return [f"{a} and {b} share no measure, so no verdict compares them ({a}: "
            f"{', '.join(measures[a]) or 'none'}; {b}: {', '.join(measures[b]) or 'none'}); "
            f"add a fine-tuning probe (--probe NAME=TASK:TRAIN:VALIDATION) or minimal pairs "
            f"(--pairs) to score both on the same ground"
            for a, b in judged_pairs(cfg.objectives)
            if not set(measures[a]) & set(measures[b])]


def _crossovers(rows: list[ArmScore], cfg: CompareConfig) -> list[Crossover]:
    """Where the ordering of two objectives' means flips between consecutive budgets."""
    by_key = {(r.measure, r.objective, r.fraction): r for r in rows}
    found = []
    for measure in sorted({r.measure for r in rows}):
        sign = 1 if measure_of(measure).higher_is_better else -1
        for a, b in judged_pairs(cfg.objectives):
            points = []
            for fraction in sorted(cfg.fractions):
                ra, rb = by_key.get((measure, a, fraction)), by_key.get((measure, b, fraction))
                if ra and rb:
                    # between the two runs' FLOPs; against a run that trained nothing (the
                    # control), the other's
                    at = math.sqrt(ra.flops * rb.flops) or max(ra.flops, rb.flops)
                    points.append((at, sign * (ra.mean - rb.mean)))
            for (x0, y0), (x1, y1) in itertools.pairwise(points):
                if y0 * y1 < 0:
                    t = y0 / (y0 - y1)
                    at = math.exp(math.log(x0) + t * (math.log(x1) - math.log(x0)))
                    found.append(Crossover(measure, a, b, at, a if y0 > 0 else b))
    return found
