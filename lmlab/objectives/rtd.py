"""Replaced-token detection (ELECTRA; Clark et al. 2020): a small masked-LM generator fills
the masked positions by sampling, and the model learns to tell, at every token, whether it is
the original or the generator's replacement."""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import Tensor

from lmlab.config import ModelConfig
from lmlab.model.generator import GENERATOR_SIZES, generator_config
from lmlab.model.selectors import Positions
from lmlab.model.sharing import SHARINGS
from lmlab.objectives.base import Objective
from lmlab.objectives.batch import Batch
from lmlab.objectives.losses import IGNORE_INDEX, LossSum, targets_at, token_loss_sum
from lmlab.objectives.mlm import MaskedLM
from lmlab.objectives.traits import Traits


def sample_tokens(logits: Tensor, uniform: Tensor) -> Tensor:
    """One id per row of `logits` (N, V), drawn from its softmax by inverting the cumulative
    distribution at `uniform` (N,) in [0, 1): the draw is the batch's, made with the objective's
    generator, so the model's forward pass needs no randomness of its own."""
    cumulative = logits.float().softmax(-1).cumsum(-1)  # (N, V)
    drawn = torch.searchsorted(cumulative, uniform.unsqueeze(-1).to(cumulative.dtype))
    return drawn.squeeze(-1).clamp(max=logits.shape[-1] - 1)  # rounding at the top end


@dataclass(frozen=True)
class Sampling:
    """How the generator's samples are drawn: ELECTRA's sampling `temperature` and its
    `disallow_correct` (the original token never drawn, so every masked token is replaced),
    1 and off in its runs."""

    temperature: float = 1.0
    disallow_correct: bool = False

    def logits(self, logits: Tensor, originals: Tensor) -> Tensor:
        """The logits (N, V) to draw from, given the generator's and the original token
        (N,) at each of its positions."""
        if self.disallow_correct:
            logits = logits.scatter(-1, originals.unsqueeze(-1), -math.inf)
        return logits / self.temperature


# A discriminator whose held-out loss is at least this share of the entropy of its replaced
# share has learned nothing past that share. Of the bert-mini runs behind the rtd comparisons
# of benchmarks/results/distill_sst2.json (`discriminator`, per budget and optimizer), those
# whose SST-2 fell to the majority class ended at 1.000 of it, those that learned, however
# little, at 0.994 or below.
NOTHING_LEARNED = 0.998


# The largest budget lmlab has measured rtd at, in training tokens: bert-mini for 20 minutes on
# a 2-core CPU, 1312 steps of 32 × 128 tokens under AdamW (benchmarks/results/
# distill_sst2.json, rtd.20_minutes), where the discriminator ended at the base rate (1.000 of
# it) at all three seeds. No smaller budget was measured to learn more than a trace (5 minutes
# there; 50 and 600 steps of modernbert-mini, benchmarks/results/rtd_recipe.json and
# rtd_recipe_600_steps.json, where it ended at 0.94-0.99 of the base rate).
LARGEST_MEASURED_TOKENS = 5_373_952


def base_rate_entropy(share: float) -> float:
    """The binary cross-entropy, in nats a token, of always predicting `share` (0 < share < 1):
    the loss of a discriminator that knows how many tokens are replaced, and not which."""
    return -(share * math.log(share) + (1 - share) * math.log(1 - share))


def of_base_rate(metrics: dict[str, float], weight: float, name: str = "rtd") -> float | None:
    """The discriminator's held-out loss a token (`{name}/discriminator_loss` / λ `weight`)
    over the entropy of its replaced share (`{name}/replaced_fraction`): 1.0 is a
    discriminator that learned nothing past that share; None without those metrics."""
    loss = metrics.get(f"{name}/discriminator_loss")
    share = metrics.get(f"{name}/replaced_fraction")
    if loss is None or share is None or not 0 < share < 1:
        return None
    return loss / weight / base_rate_entropy(share)


def replaced_labels(original: Tensor, corrupted: Tensor) -> Tensor:
    """1.0 where the discriminator's input differs from the original text: a sample that
    happens to equal the original token counts as original (ELECTRA)."""
    return (corrupted != original).float()


class ReplacedTokenDetection(Objective):
    """Mask as MaskedLM does; a generator (a masked LM `generator_size` of the model: a quarter
    or half its width, or half its depth; the token embedding shared) predicts each masked
    token and samples one; the model (the discriminator) reads the text with the samples in
    place and classifies every token as original or replaced. Loss = generator MLM
    mean + `weight` (λ = 50) × discriminator BCE mean; the samples, drawn as `sampling`
    says, pass no gradient.
    `sharing` (lmlab.model.sharing): "electra", both losses train the shared table; "gdes"
    (DeBERTa-v3), the generator's loss alone trains it and the discriminator reads it plus a
    residual table of its own, zero at first, which its loss alone trains.

    Before / after (rate 0.3, 80/10/10 as for mlm; `M` = [MASK], `-` = ignored target):

        tokens    [CLS] the  cat  sat  down [SEP]
        inputs    [CLS] the  M    sat  M    [SEP]     (the generator's input)
        targets     -    -   cat   -   down   -       (its targets)
        sampled   [CLS] the  dog  sat  down [SEP]     (the discriminator's input)
        replaced    0    0    1    0    0     0       (down drawn back: original)

    The discriminator reads `sampled` as rows of the shared table E (electra: its BCE trains
    those six rows of E too), or of sg(E) + E_Δ (`--rtd-sharing gdes`: at step 0 the same
    rows, E_Δ being zero; its BCE trains those six rows of E_Δ and no row of E, which the
    generator's MLM alone trains).

    Validation reports the generator's masked accuracy (`rtd/accuracy`) and the share of
    the tokens replaced (`rtd/replaced_fraction`): a generator that never learns replaces
    almost every masked token with noise the discriminator tells apart trivially. From half
    the run on, training warns once when the discriminator's held-out loss sits at the
    entropy of that share (`warnings`): it has learned nothing past how many are replaced.
    """

    name = "rtd"
    title = "replaced-token detection (rtd)"
    # Its step runs the generator, then the model on the generator's samples.
    two_passes = True

    def __init__(self, masked: MaskedLM, weight: float = 50.0,
                 generator_size: str = "width/4", sharing: str = "electra",
                 sampling: Sampling = Sampling()) -> None:
        if generator_size not in GENERATOR_SIZES:
            raise ValueError(f"generator size {generator_size!r} is not one of "
                             f"{', '.join(GENERATOR_SIZES)}")
        if not weight > 0:
            raise ValueError(f"the discriminator's loss weight must be positive, got {weight}")
        if sharing not in SHARINGS:
            raise ValueError(f"embedding sharing {sharing!r} is not one of {', '.join(SHARINGS)}")
        self.masked, self.weight, self.generator_size = masked, weight, generator_size
        self.sharing, self.sampling = sharing, sampling
        self.special = masked.special
        self.special.require_all(self.traits.needs, self.title)

    @property
    def traits(self) -> Traits:
        # The generator is a masked LM: it fills masks and scores text as one.
        return Traits(attention="bidirectional", heads=("generator", "rtd"), scoring="pseudo",
                      fill_mask=("generator", 0), needs=self.masked.traits.needs)

    @property
    def token_term(self) -> str:
        return "generator"

    def head_options(self) -> dict[str, dict]:
        # At first the generator guesses almost nothing: about every selected token is replaced.
        return {"generator": {"size": self.generator_size, "sharing": self.sharing},
                "rtd": {"prior": self.masked.rate_at(0)}}

    def for_run(self, total_steps: int) -> ReplacedTokenDetection:
        fixed = copy.copy(self)
        fixed.masked = self.masked.for_run(total_steps)
        return fixed

    def for_evaluation(self) -> ReplacedTokenDetection:
        evaluated = copy.copy(self)
        evaluated.masked = self.masked.for_evaluation()
        return evaluated

    def predicted_fraction(self, rows: int, seq_len: int) -> float:
        """The discriminator projects nothing to the vocabulary; the generator's projection
        is counted with the generator (`companion_models`)."""
        return 0.0

    def target_fraction(self, rows: int, seq_len: int) -> float:
        """The discriminator has a target at every position: original or replaced."""
        return 1.0

    def warnings(self, metrics: dict[str, float]) -> list[str]:
        """A discriminator that has learned nothing past the replaced share: its held-out
        loss (λ × BCE a token) at that share's entropy."""
        ratio = of_base_rate(metrics, self.weight, self.name)
        if ratio is None or ratio < NOTHING_LEARNED:
            return []
        share = metrics[f"{self.name}/replaced_fraction"]
        return [f"the discriminator has learned nothing past the replaced share: its held-out "
                f"loss is {ratio:.3f} of that of always guessing {share:.3f} replaced, so "
                f"fine-tuning will find little in it; under AdamW, consider --optimizer muon, "
                f"or a longer run"]

    def budget_warnings(self, tokens: int) -> list[str]:
        """A run shorter than the largest budget lmlab measured rtd at, where it learned
        nothing past the base rate."""
        if tokens >= LARGEST_MEASURED_TOKENS:
            return []
        return [f"rtd: lmlab has measured its discriminator at or near the base rate (learning "
                f"nothing past how many tokens are replaced) up to {LARGEST_MEASURED_TOKENS:,} "
                f"tokens on CPU; this run's {tokens:,} tokens are fewer, so expect it to "
                f"learn little or nothing — consider --objective mlm"]

    def target_bound(self, rows: int, seq_len: int) -> int:
        """Masked LM's: the generator's positions pad to it; the discriminator's, every real
        token, hold more and so pad to every position (in the rare batch so padded that its
        real tokens fit the bound, to the bound: a second graph). Padding entries place no
        sample (`outputs`) and count as no target (`loss`)."""
        return self.masked.target_bound(rows, seq_len)

    def companion_models(self, cfg: ModelConfig, rows: int,
                         seq_len: int) -> list[tuple[ModelConfig, float]]:
        """The generator, projecting at the masked share of positions. Its decoder is as wide
        as the shared embedding (d, not the generator's width), so the share is scaled by
        d / generator width for `flops_per_token`'s 6·width·V·share to count 6·d·V·share."""
        inner = generator_config(cfg, self.generator_size)
        share = self.masked.predicted_fraction(rows, seq_len)
        return [(inner, share * cfg.d_model / inner.d_model)]

    def make_batch(self, tokens: Tensor, generator: torch.Generator, step: int = 0) -> Batch:
        masked = self.masked.make_batch(tokens, generator, step)
        real = masked.mask.segment_ids > 0 if masked.mask.segment_ids is not None else \
            torch.ones_like(tokens, dtype=torch.bool)
        return replace(
            masked, predict_at={"generator": masked.predict_at[self.masked.head],
                                "rtd": Positions.where(real)},
            extras={"original": tokens, "draw": torch.rand(tokens.shape, generator=generator)})

    def outputs(self, model, batch: Batch, unprojected: bool = False) -> dict[str, Tensor]:
        """The generator's logits at the masked positions (N, V), the discriminator's scores
        at every real token on the text with the generator's samples in place, and which
        tokens those samples replaced (B, T)."""
        at = batch.predict_at["generator"]
        inputs = batch.model_inputs()
        logits = model(**{**inputs, "predict_at": {"generator": at}})["generator"]
        original = batch.extras["original"]
        originals = at.read(original).clamp(min=0)  # a padding entry's sample is never placed
        sampled = sample_tokens(self.sampling.logits(logits.detach(), originals),
                                at.read(batch.extras["draw"]))
        corrupted = at.write(sampled, into=original)
        scores = model(**{**inputs, "input_ids": corrupted,
                          "predict_at": {"rtd": batch.predict_at["rtd"]}})["rtd"]
        return {"generator": logits, "rtd": scores.squeeze(-1),
                "replaced": replaced_labels(original, corrupted)}

    def target_counts(self, batch: Batch) -> dict[str, Tensor]:
        return {"generator": (batch.targets != IGNORE_INDEX).sum(),
                "discriminator": batch.predict_at["rtd"].real().sum()}

    def loss(self, outputs: dict[str, Tensor], batch: Batch) -> LossSum:
        at = batch.predict_at["generator"]
        generator_sum, masked_count = token_loss_sum(outputs["generator"], batch.targets, at)
        real = batch.predict_at["rtd"].real()  # (N,) False at padding entries
        scored = real.float()
        labels = targets_at(outputs["replaced"], batch.predict_at["rtd"]) * scored  # (N,)
        bce = F.binary_cross_entropy_with_logits(outputs["rtd"].float(), labels, weight=scored,
                                                 reduction="sum")
        targets = targets_at(batch.targets, at)
        correct = (outputs["generator"].argmax(-1) == targets).sum()
        tokens = real.sum()
        return LossSum({"generator": (generator_sum, masked_count),
                        "discriminator": (self.weight * bce, tokens)},
                       details={"replaced_fraction": (labels.sum(), tokens),
                                "generator_accuracy": (correct, masked_count)})
