"""Validation during training, comparable across runs.

Masked objectives are scored under a FIXED mask: 15% selection, 80/10/10, a fixed seed,
whatever rate the run trains with, so runs with different masking can be compared. Every
token objective also reports accuracy and bits per byte (comparable across tokenizers).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from lmlab.kernels.precision import autocast
from lmlab.objectives.base import Objective
from lmlab.objectives.losses import IGNORE_INDEX, targets_at
from lmlab.runs.metrics import GENERAL_TEXT
from lmlab.train.distributed import Env, all_reduce_sum

EVAL_SEED = 20240607


def _correct_predictions(objective: Objective, outputs: dict[str, Tensor], batch) -> Tensor:
    head = objective.heads[0]
    targets = targets_at(batch.targets, batch.predict_at[head])
    logits = outputs[head].reshape(-1, outputs[head].shape[-1])
    return ((logits.argmax(-1) == targets) & (targets != IGNORE_INDEX)).sum()


@torch.no_grad()
def validate(model: nn.Module, objectives: dict[str, Objective], blocks: list[Tensor],
             bytes_per_token: float, env: Env, precision: str = "fp32") -> dict[str, float]:
    """Loss, perplexity, accuracy and bits per byte of each objective on `blocks`."""
    was_training = model.training
    model.eval()
    metrics: dict[str, float] = {}
    for name, objective in objectives.items():
        generator = torch.Generator().manual_seed(EVAL_SEED)
        totals: dict[str, Tensor] = {}
        for tokens in blocks:
            batch = objective.make_batch(tokens, generator).to(env.device)
            with autocast(precision, env.device):
                outputs = objective.outputs(model, batch)
            losses = objective.loss(outputs, batch)
            for term, (loss_sum, count) in losses.terms.items():
                totals[f"{term}_sum"] = totals.get(f"{term}_sum", 0) + loss_sum.double()
                totals[f"{term}_count"] = totals.get(f"{term}_count", 0) + count
            for detail, (value, count) in losses.details.items():  # reported as ratios
                totals[f"{detail}_part"] = totals.get(f"{detail}_part", 0) + value.double()
                totals[f"{detail}_of"] = totals.get(f"{detail}_of", 0) + count
            totals["correct"] = totals.get("correct", 0) + _correct_predictions(
                objective, outputs, batch)
        totals = all_reduce_sum({k: torch.as_tensor(v) for k, v in totals.items()}, env)
        terms = [k[: -len("_sum")] for k in totals if k.endswith("_sum")]
        for term in terms:
            loss = float(totals[f"{term}_sum"] / totals[f"{term}_count"].clamp(min=1))
            metrics[f"{name}/{term}_loss"] = loss
            if term == objective.token_term:  # perplexities of token predictions only
                metrics[f"{name}/{term}_ppl"] = math.exp(min(loss, 50.0))
                metrics[f"{name}/{term}_bpb"] = loss / math.log(2) / bytes_per_token
        for detail in (k[: -len("_part")] for k in totals if k.endswith("_part")):
            metrics[f"{name}/{detail}"] = float(
                totals[f"{detail}_part"] / totals[f"{detail}_of"].clamp(min=1))
        metrics[f"{name}/accuracy"] = float(
            totals["correct"] / totals[f"{objective.token_term}_count"].clamp(min=1))
    model.train(was_training)
    return metrics


class ValidationWarnings:
    """The evaluated objectives' warnings about validation metrics (`Objective.warnings`),
    each objective's said once (a resumed run may say it again)."""

    def __init__(self, objectives: dict[str, Objective]) -> None:
        self.objectives, self.said = objectives, set()

    def __call__(self, metrics: dict[str, float]) -> list[str]:
        lines = []
        for name, objective in self.objectives.items():
            found = [] if name in self.said else objective.warnings(metrics)
            if found:
                self.said.add(name)
                lines += found
        return lines


def headline_loss(metrics: dict[str, float]) -> float:
    """One number to pick the best checkpoint by: the sum of the losses on the run's own text
    (general text, where measured, only says what was forgotten)."""
    return sum(v for k, v in metrics.items()
               if k.endswith("_loss") and not k.startswith(GENERAL_TEXT))
