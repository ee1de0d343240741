"""Names that runs saved by earlier versions recorded and lmlab has since changed, read as
today's, so that such a run loads, predicts and exports exactly as before. The run's files are
read through here and only here: config.json's heads (lmlab.runs.schema) and a checkpoint's
weight names (lmlab.runs.checkpoints). A run written again is written with today's names.

    span → answer    the extractive-QA head: `span` names T5's span-corruption objective alone
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

Value = TypeVar("Value")

HEAD_RENAMES = {"span": "answer"}


def current_heads(heads: Mapping[str, Value]) -> dict[str, Value]:
    """config.json's `heads` (head name → options) under today's head names."""
    return {HEAD_RENAMES.get(name, name): options for name, options in heads.items()}


def current_weight_name(name: str) -> str:
    """A checkpoint's weight name under today's head names: `heads.span.outputs.weight` →
    `heads.answer.outputs.weight`; any other name is today's already."""
    group, _, rest = name.partition(".")
    head, dot, inside = rest.partition(".")
    if group != "heads" or not dot:
        return name
    return f"heads.{HEAD_RENAMES.get(head, head)}.{inside}"


def current_weights(tensors: Mapping[str, Value]) -> dict[str, Value]:
    """A checkpoint's tensors by today's weight names."""
    return {current_weight_name(name): tensor for name, tensor in tensors.items()}
