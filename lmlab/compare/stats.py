"""Is objective A better than objective B on a measure, and could this design have told?

Scores come as arrays of shape (K, F, N): pre-training seed × fine-tuning seed × test item,
one per objective. Everything is paired: seed i of A shares its data order with seed i of B,
fine-tuning seed j of each with fine-tuning seed j of the other, and every run scores the
same N items. Measures without fine-tuning have F = 1.

Runs that differ only in their seeds often differ by as much as objectives do (Dror et al.
2019, "Deep Dominance"; Bouthillier et al. 2021, "Accounting for Variance in Machine Learning
Benchmarks"), so the uncertainty of a difference comes from seeds as well as items, and a
comparison that resamples only test items claims far too much.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

CONFIDENCE = 0.95
POWER = 0.80
MAX_DEGREES_OF_FREEDOM = 1000  # beyond this t quantiles move by under 0.003
DRAWS_PER_CHUNK = 2**22  # bounds the index array of one chunk of resamples (32 MB)
NO_DIFFERENCE = "no detectable difference"


@dataclass(frozen=True)
class Difference:
    """The advantage of A over B on one measure: positive means A is better.

    For measures where higher is better that is mean(A) - mean(B); for losses and bits it is
    mean(B) - mean(A). `low` and `high` bound the 95% interval of the advantage;
    `minimum_detectable` is the smallest true advantage this design would detect with 80%
    power at α = 0.05, approximated as (t_0.975 + t_0.80) · standard_error, which treats the
    standard error as known: with few degrees of freedom it is optimistic (at 2 to 4 degrees
    of freedom such a difference is found about two times in three, not four in five).
    """

    estimate: float
    low: float
    high: float
    p_value: float  # two-sided, against no difference
    standard_error: float
    degrees_of_freedom: int
    minimum_detectable: float
    resamples: int
    mean_a: float  # on the measure's own scale
    mean_b: float
    notes: tuple[str, ...] = ()  # what the interval leaves out


@dataclass(frozen=True)
class Verdict:
    measure: str
    difference: Difference
    adjusted_p: float  # Holm-adjusted across the measures judged together
    says: str  # "<A> better", "<B> better" or "no detectable difference"

    @property
    def text(self) -> str:
        d = self.difference
        if self.says == NO_DIFFERENCE and d.standard_error == 0:
            # nothing varied: no run or item told the two apart, so no power can be claimed
            return f"{NO_DIFFERENCE} (identical scores in every run and item)"
        if self.says == NO_DIFFERENCE:
            return f"{NO_DIFFERENCE} (this design detects ≥ {d.minimum_detectable:.3g})"
        # The interval of the named side's advantage, so both numbers read as "better by".
        low, high = (d.low, d.high) if d.estimate > 0 else (-d.high, -d.low)
        return (f"{self.says} by {abs(d.estimate):.3g} (95% interval {low:.3g} to {high:.3g}, "
                f"Holm-adjusted p = {self.adjusted_p:.2g})")


def paired_bootstrap(a: np.ndarray, b: np.ndarray, resamples: int = 2000, seed: int = 0,
                     higher_is_better: bool = True) -> Difference:
    """Compare scores `a` and `b`, each (K, F, N), as described in `Difference`.

    The standard error comes from a paired bootstrap (Efron & Tibshirani 1993) of the
    per-cell differences at two levels:

    - Runs: whole pre-training seeds, each with all its fine-tuning runs, as in the
      hierarchical bootstrap of Davison & Hinkley 1997 (§3.8) and Ren et al. 2010. Resampling
      fine-tuning seeds again inside each drawn seed would count their variation twice.
      With one pre-training seed the fine-tuning seeds are resampled instead (see `notes`).
    - Items: every run scores the same items, so items are crossed with runs, not nested in
      them; they are resampled on their own, as in Owen's 2007 pigeonhole bootstrap. The
      item-by-run noise then enters both levels, which errs on the wide side.

    Each level draws n - 1 of its n units (the rescaling bootstrap of Rao & Wu 1988), which
    keeps the variance of a mean unbiased where drawing n would shrink it by (n - 1)/n, a
    third at three seeds.

    The interval is estimate ± t · standard error, with Student's t on Satterthwaite's
    (1946) degrees of freedom for the two levels, rather than bootstrap percentiles:
    percentiles never leave the range of the seeds' means, and with three seeds that range
    misses the true mean a quarter of the time when seed variation dominates.
    """
    diff = _oriented_difference(a, b, higher_is_better)
    if resamples < 2:
        raise ValueError(f"resamples must be at least 2; got {resamples}")
    rng = np.random.default_rng(seed)
    runs = _run_means(diff)
    item_means = diff.mean(axis=(0, 1))
    parts = [] if runs is None else [(_bootstrap_variance(runs, resamples, rng), len(runs) - 1)]
    parts.append((_bootstrap_variance(item_means, resamples, rng), len(item_means) - 1))
    standard_error = math.sqrt(sum(variance for variance, _ in parts))
    degrees_of_freedom = _satterthwaite(parts)
    estimate = float(diff.mean())
    critical = _t_quantile(CONFIDENCE, degrees_of_freedom)
    # The one-sided POWER quantile is the t with P(|T| ≤ t) = 2 · POWER - 1.
    detectable = (critical + _t_quantile(2 * POWER - 1, degrees_of_freedom)) * standard_error
    return Difference(
        estimate=estimate, low=estimate - critical * standard_error,
        high=estimate + critical * standard_error,
        p_value=_two_sided_p(estimate, standard_error, degrees_of_freedom),
        standard_error=standard_error, degrees_of_freedom=degrees_of_freedom,
        minimum_detectable=detectable, resamples=resamples,
        mean_a=float(np.mean(a)), mean_b=float(np.mean(b)), notes=_notes(diff.shape))


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm–Bonferroni adjusted p-values (Holm 1979), in the order given."""
    p = np.asarray(p_values, dtype=float)
    outside = p[~((p >= 0) & (p <= 1))]
    if outside.size:
        raise ValueError(f"p-values must lie in [0, 1]; got {outside[0]}")
    order = np.argsort(p, kind="stable")
    scaled = (len(p) - np.arange(len(p))) * p[order]
    adjusted = np.empty_like(p)
    adjusted[order] = np.minimum(1.0, np.maximum.accumulate(scaled))
    return adjusted.tolist()


def verdicts(differences: Mapping[str, Difference], names: tuple[str, str] = ("A", "B"),
             alpha: float = 0.05) -> list[Verdict]:
    """One verdict per measure, Holm-adjusted across all of them.

    A side is named only when its adjusted p is below `alpha` and the 95% interval excludes
    zero too, so no verdict ever contradicts the interval printed beside it.
    """
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1); got {alpha}")
    adjusted = holm([d.p_value for d in differences.values()])
    return [verdict(measure, d, p, names, alpha)
            for (measure, d), p in zip(differences.items(), adjusted, strict=True)]


def verdict(measure: str, difference: Difference, adjusted_p: float,
            names: tuple[str, str] = ("A", "B"), alpha: float = 0.05) -> Verdict:
    """The verdict on one difference whose p-value was already adjusted (see `verdicts`)."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1); got {alpha}")
    says = NO_DIFFERENCE
    if adjusted_p < alpha and not difference.low <= 0 <= difference.high:
        says = f"{names[0] if difference.estimate > 0 else names[1]} better"
    return Verdict(measure, difference, adjusted_p, says)


def _oriented_difference(a: np.ndarray, b: np.ndarray, higher_is_better: bool) -> np.ndarray:
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape or a.ndim != 3 or 0 in a.shape:
        raise ValueError(f"scores must be two non-empty (K, F, N) arrays of one shape; "
                         f"got {a.shape} and {b.shape}")
    if a.shape[2] < 2:
        raise ValueError(f"need at least 2 test items; got {a.shape[2]}")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("scores contain NaN or infinity")
    return a - b if higher_is_better else b - a


def _run_means(diff: np.ndarray) -> np.ndarray | None:
    """Mean difference per unit of the outermost run level that has two or more units."""
    seeds, finetunes, _ = diff.shape
    if seeds > 1:
        return diff.mean(axis=(1, 2))
    if finetunes > 1:
        return diff[0].mean(axis=1)
    return None


def _notes(shape: tuple[int, ...]) -> tuple[str, ...]:
    seeds, finetunes, _ = shape
    if seeds > 1:
        return ()
    if finetunes > 1:
        return ("one pre-training seed: the interval leaves out how pre-training seeds vary",)
    return ("one run per objective: the interval covers only the choice of test items",)


def _bootstrap_variance(unit_means: np.ndarray, resamples: int,
                        rng: np.random.Generator) -> float:
    """Variance of the mean of n - 1 units drawn with replacement from `unit_means`."""
    draws = len(unit_means) - 1
    rows = max(1, DRAWS_PER_CHUNK // draws)
    means = [unit_means[rng.integers(0, len(unit_means), (min(rows, resamples - start), draws))]
             .mean(axis=1) for start in range(0, resamples, rows)]
    return float(np.concatenate(means).var())


def _satterthwaite(parts: Sequence[tuple[float, int]]) -> int:
    """Degrees of freedom of a sum of variance estimates, floored (which errs wide)."""
    total = sum(variance for variance, _ in parts)
    spread = sum(variance**2 / df for variance, df in parts)
    if spread == 0:
        return min(MAX_DEGREES_OF_FREEDOM, max(df for _, df in parts))
    return max(1, min(MAX_DEGREES_OF_FREEDOM, int(total**2 / spread)))


def _two_sided_p(estimate: float, standard_error: float, degrees_of_freedom: int) -> float:
    if standard_error == 0:
        return float(estimate == 0)
    central = _t_central_probability(abs(estimate) / standard_error, degrees_of_freedom)
    return max(0.0, 1.0 - central)


@lru_cache(maxsize=4096)  # few distinct (central, df) pairs recur across measures
def _t_quantile(central: float, degrees_of_freedom: int) -> float:
    """The t with P(|T| ≤ t) = `central`, by bisection."""
    low, high = 0.0, 1.0
    while _t_central_probability(high, degrees_of_freedom) < central:
        low, high = high, 2 * high
    for _ in range(60):
        middle = (low + high) / 2
        if _t_central_probability(middle, degrees_of_freedom) < central:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def _t_central_probability(t: float, degrees_of_freedom: int) -> float:
    """P(|T| ≤ t) for Student's t with integer degrees of freedom, in closed form
    (Abramowitz & Stegun 1964, 26.7.3 and 26.7.4)."""
    theta = math.atan(t / math.sqrt(degrees_of_freedom))
    cos_squared = math.cos(theta) ** 2
    if degrees_of_freedom % 2:
        # 2/π (θ + sin θ (cos θ + 2/3 cos³θ + 2·4/(3·5) cos⁵θ + ... up to cos^(ν-2) θ))
        terms = (degrees_of_freedom - 1) // 2
        j = np.arange(1, terms)
        weights = np.cumprod(np.concatenate([[1.0], 2 * j / (2 * j + 1)]))[:terms]
        series = math.cos(theta) * float(weights @ cos_squared ** np.arange(len(weights)))
        return 2 / math.pi * (theta + math.sin(theta) * series)
    # sin θ (1 + 1/2 cos²θ + 1·3/(2·4) cos⁴θ + ... up to cos^(ν-2) θ)
    j = np.arange(1, degrees_of_freedom // 2)
    weights = np.cumprod(np.concatenate([[1.0], (2 * j - 1) / (2 * j)]))
    return math.sin(theta) * float(weights @ cos_squared ** np.arange(len(weights)))
