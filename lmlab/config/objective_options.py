"""The options that shape an objective, as users set them (`--mlm-rate 0.3`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from lmlab.config.fields import check_choices, documented

# The objective of a comparison's arm that trains nothing (`--objectives none,...`): an --init
# run as it came, which compare runs and plan prices.
CONTROL = "none"


@dataclass(frozen=True)
class ObjectiveOptions:
    mlm_rate: float = documented(0.15, "share of ordinary tokens a masked objective selects")
    mlm_rate_start: float | None = documented(
        None, "start the masking rate here and move it linearly to --mlm-rate over the run "
        "(e.g. 0.30)")
    mlm_rate_schedule: str | None = documented(
        None, "masking rates in percent held in turn over equal shares of the run, e.g. "
        "30,15,5 (mmBERT): 30% for the first third, 15% the second, 5% the last, in place "
        "of --mlm-rate; validation masks 15% still")
    mask_prob: float = documented(0.8, "share of selected tokens replaced by [MASK]")
    random_prob: float = documented(0.1, "share of selected tokens replaced by a random "
                                         "token (the rest stay as they are)")
    mlm_selection: Literal["bernoulli", "exact"] = documented(
        "bernoulli", "select each token independently, or exactly round(rate × tokens) per row")
    whole_word: bool = documented(False, "select whole words rather than single tokens")
    span_noise_density: float = documented(0.15, "share of tokens span corruption hides")
    span_mean_length: float = documented(3.0, "mean length of a hidden span")
    prefix_len: int | None = documented(
        None, "prefix LM: a fixed prefix length; none = drawn uniformly per row")

    rtd_weight: float = documented(
        50.0, "rtd: weight λ of the discriminator's loss beside the generator's (ELECTRA: 50)")
    rtd_generator: Literal["width/4", "width/2", "depth/2"] = documented(
        "width/4", "rtd: the generator beside the model: a quarter or half its width, or half "
        "its depth")
    rtd_sharing: Literal["electra", "gdes"] = documented(
        "electra", "rtd: how the generator shares the token embedding: electra (one table "
        "both train) or gdes (DeBERTa-v3: the model reads it without training it, plus a "
        "residual table of its own)")
    rtd_temperature: float = documented(
        1.0, "rtd: the temperature the generator's samples are drawn at (ELECTRA: 1)")
    rtd_disallow_correct: bool = documented(
        False, "rtd: never let the generator draw the original token, so every masked token "
               "is replaced (ELECTRA's disallow_correct, off in its runs)")

    def __post_init__(self) -> None:
        check_choices(self)
        for name in ("mlm_rate", "mask_prob", "random_prob", "span_noise_density"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must lie in [0, 1], got {getattr(self, name)}")
        if not 0 < self.rtd_temperature < math.inf:
            raise ValueError(f"rtd_temperature must be a positive number, got "
                             f"{self.rtd_temperature}")
        if self.mlm_rate_schedule is not None and self.mlm_rate_start is not None:
            raise ValueError("give --mlm-rate-schedule or --mlm-rate-start, not both")
        self.mlm_rates  # noqa: B018 — checked as it is read

    @property
    def mlm_rates(self) -> tuple[float, ...] | None:
        """--mlm-rate-schedule as fractions: "30,15,5" → (0.30, 0.15, 0.05); None if unset."""
        if self.mlm_rate_schedule is None:
            return None
        try:
            percents = [float(part) for part in self.mlm_rate_schedule.split(",")]
        except ValueError:
            percents = []
        if not percents or not all(1 <= percent <= 100 for percent in percents):
            raise ValueError(f"mlm_rate_schedule: give masking rates in percent from 1 to 100, "
                             f"comma-separated (e.g. 30,15,5), got {self.mlm_rate_schedule!r}")
        return tuple(percent / 100 for percent in percents)
