"""Narrower students: keep a share of every block's attention heads and MLP neurons, the most
important by weight magnitude (a data-free stand-in for the gradient importance of Michel et
al. 2019): a head by ‖its q, k, v rows‖ · ‖its output columns‖, a neuron by ‖its input rows‖ ·
‖its output column‖. Kept units keep their order and their weights exactly."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from lmlab.model import LanguageModel


def top(scores: Tensor, keep: int) -> Tensor:
    """The indices of the `keep` highest scores, in ascending index order."""
    return scores.topk(keep).indices.sort().values


def head_rows(kept: Tensor, heads: int, head_dim: int) -> Tensor:
    """The fused q, k, v projection's rows of the kept heads, (3 · kept · head_dim,)."""
    within = (kept[:, None] * head_dim + torch.arange(head_dim)).reshape(-1)
    return torch.cat([within + part * heads * head_dim for part in range(3)])


def pruned_block(state: dict[str, Tensor], prefix: str, cfg, heads_kept: int,
                 neurons_kept: int) -> dict[str, Tensor]:
    """The block's tensors under `prefix`, narrowed to its most important units."""
    heads, head_dim, ffn = cfg.n_heads, cfg.head_dim, cfg.ffn_dim
    qkv, out = state[f"{prefix}attn.qkv.weight"], state[f"{prefix}attn.out.weight"]
    per_head = (qkv.view(3, heads, head_dim, -1).pow(2).sum((0, 2, 3)).sqrt()
                * out.view(out.shape[0], heads, head_dim).pow(2).sum((0, 2)).sqrt())
    kept = top(per_head, heads_kept)
    rows = head_rows(kept, heads, head_dim)
    columns = (kept[:, None] * head_dim + torch.arange(head_dim)).reshape(-1)
    up, down = state[f"{prefix}mlp.up.weight"], state[f"{prefix}mlp.down.weight"]
    parts = up.shape[0] // ffn  # 2 for gated MLPs: gate rows, then value rows
    per_neuron = (up.view(parts, ffn, -1).pow(2).sum((0, 2)).sqrt()
                  * down.pow(2).sum(0).sqrt())
    neurons = top(per_neuron, neurons_kept)
    up_rows = torch.cat([neurons + part * ffn for part in range(parts)])
    cut = {"attn.qkv.weight": (0, rows), "attn.qkv.bias": (0, rows),
           "attn.out.weight": (1, columns), "mlp.up.weight": (0, up_rows),
           "mlp.up.bias": (0, up_rows), "mlp.down.weight": (1, neurons)}
    found = {}
    for key, tensor in state.items():
        if key.startswith(prefix):
            dim, index = cut.get(key[len(prefix):], (None, None))
            found[key] = tensor if dim is None else tensor.index_select(dim, index)
    return found


def prune_width(model: LanguageModel, share: float, heads: Callable) -> LanguageModel:
    """`model` with round(share × heads) heads and round(share × neurons) MLP neurons (at
    least one of each) in every block, the rest of it unchanged."""
    cfg = model.cfg
    if not 0 < share <= 1:
        raise ValueError(f"--width {share}: give the share of heads and neurons to keep, "
                         "in (0, 1]")
    if cfg.kv_heads != cfg.n_heads:
        raise ValueError("--width prunes models without grouped-query attention only")
    heads_kept = max(1, round(share * cfg.n_heads))
    neurons_kept = max(1, round(share * cfg.ffn_dim))
    narrow = cfg.with_changes(n_heads=heads_kept, n_kv_heads=None, head_size=cfg.head_dim,
                              ffn_size=neurons_kept)
    student = LanguageModel(narrow, heads=heads(narrow))
    state = model.state_dict()
    for index in range(cfg.n_layers):
        state.update(pruned_block(state, f"backbone.blocks.{index}.", cfg, heads_kept,
                                  neurons_kept))
    student.load_state_dict(state, strict=True)
    return student
