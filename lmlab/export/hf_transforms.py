"""How one lmlab tensor maps to the tensors under one or more Hugging Face keys: the same
tensor, GPT-2's transposed Conv1D layout, one fused projection split into several HF ones
(q/k/v, gate/up), or one tensor HF keeps under several keys."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from lmlab.config import ModelConfig


@dataclass(frozen=True)
class Transform:
    # (tensor, number of HF keys, config) → their tensors; the config sizes a fused tensor's parts
    to_hf: Callable[[Tensor, int, ModelConfig], list[Tensor]]
    from_hf: Callable[[list[Tensor]], Tensor]


def _stack_rows(tensors: list[Tensor]) -> Tensor:
    return torch.cat(tensors)  # fused projections stack their parts on the output dim


def _transpose_matrix(tensor: Tensor) -> Tensor:
    return tensor.t() if tensor.ndim == 2 else tensor  # a bias has no layout to change


def _fused(rows: Callable[[ModelConfig], tuple[int, ...]]) -> Transform:
    """One fused lmlab projection ↔ one HF Linear per part, of `rows(cfg)` output rows each."""
    return Transform(lambda tensor, parts, cfg: list(tensor.split(rows(cfg))), _stack_rows)


def _qkv_rows(cfg: ModelConfig) -> tuple[int, int, int]:
    queries, keys = cfg.n_heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
    return queries, keys, keys


def _gate_up_rows(cfg: ModelConfig) -> tuple[int, int]:
    return cfg.ffn_dim, cfg.ffn_dim


SAME = Transform(lambda tensor, parts, cfg: [tensor], lambda tensors: tensors[0])
# lmlab's qkv is [q; k; v] (k and v narrower than q under grouped-query attention) and a gated
# MLP's `up` is [gate; value] (MLP.forward chunks it in that order), while Llama and BERT keep
# one Linear per part.
QKV = _fused(_qkv_rows)
GATE_UP = _fused(_gate_up_rows)
# GPT-2's Conv1D stores weights as (in, out), the transpose of nn.Linear.
CONV1D = Transform(lambda tensor, parts, cfg: [_transpose_matrix(tensor)],
                   lambda tensors: _transpose_matrix(tensors[0]))
# One lmlab tensor that HF keeps under several keys; the first is the one HF computes with.
DUPLICATED = Transform(lambda tensor, parts, cfg: [tensor] * parts, lambda tensors: tensors[0])
