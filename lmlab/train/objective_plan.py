"""What an objective decides about its pre-training run, worked out once and purely (no data
read, no weights made): the model preset `--model auto` stands for, how documents fill rows,
the id rows are padded with, the heads the model carries and the objectives validation scores
with. None of these depend on the run's length; its FLOPs per token do (an alternating
objective's shares follow the steps), so they are counted from the objective for the run."""

from __future__ import annotations

from dataclasses import dataclass

from lmlab.config.presets import auto_family
from lmlab.config.training import TrainConfig
from lmlab.data.special_tokens import SpecialTokens
from lmlab.objectives.base import Objective
from lmlab.objectives.documents import block_pad_id, blocks_pad_with


@dataclass(frozen=True)
class ObjectivePlan:
    preset: str  # family-size; `auto` is the mini size of the objective's family
    packing: str  # concatenate, best_fit or sentences
    pad_id: int  # what blocks are padded with
    heads: tuple[str, ...]
    eval_objectives: dict[str, Objective]  # by name, each as validation scores it


def plan_objective(objective: Objective, cfg: TrainConfig,
                   special: SpecialTokens) -> ObjectivePlan:
    layout = _packing(objective, cfg.packing)
    if cfg.seq_len_warmup_steps and layout == "sentences":
        raise ValueError(f"--seq-len-warmup-steps cuts rows into pieces, but {objective.title} "
                         "reads whole sentence pairs a row; leave it out")
    preset = f"{auto_family(objective)}-mini" if cfg.model == "auto" else cfg.model
    return ObjectivePlan(preset, layout, _pad_id(special, layout), tuple(objective.heads),
                         objective.evaluated_leaves())


def _packing(objective: Objective, asked: str) -> str:
    """The layout the objective needs (whole sentences for NSP), else the one asked for."""
    if objective.packing == "sentences":
        return "sentences"
    return "concatenate" if asked == "auto" else asked


def _pad_id(special: SpecialTokens, layout: str) -> int:
    """[PAD]. A tokenizer without one of its own (GPT-2's) reads concatenated blocks only,
    which are never padded."""
    if layout == "concatenate" and blocks_pad_with(special) is None:
        return special.padding_id  # never written
    return block_pad_id(special)
