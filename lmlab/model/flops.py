"""Training FLOPs per token of a model configuration, as an objective trains it.

FLOPs per token follow Kaplan et al. 2020 / PaLM (Chowdhery et al. 2022, appendix B): a
forward pass costs 2 FLOPs per weight in a matmul, the backward pass twice that (6 in all),
plus attention scores and values, 6 · 2 · layers · d_model · seq_len (i.e. 12·L·d·T; the
heads' total width stands for d_model where a config sets the head size apart).
"""

from __future__ import annotations

from lmlab.config import ModelConfig


def flops_per_token(cfg: ModelConfig, seq_len: int, predicted_fraction: float = 1.0,
                    last_block_fraction: float = 1.0) -> float:
    """Training FLOPs per input token; `predicted_fraction` of positions run the vocabulary
    projection, as the objective counts it (`Objective.predicted_fraction`: about 0.15 for
    MLM, 0.19 for span corruption), and `last_block_fraction` run the last block past its
    attention (`Objective.last_block_fraction`). Norms, softmax and the small layers of heads
    (BERT's transform before its decoder, the NSP classifier) are left out."""
    d = cfg.d_model
    attention_width = cfg.n_heads * cfg.head_dim  # d, unless the head size is set apart
    # q and out span every head, k and v only the key/value heads: 4·d² without grouping
    attention_weights = 2 * d * (attention_width + cfg.kv_heads * cfg.head_dim)
    mlp_weights = (3 if cfg.gated else 2) * d * cfg.ffn_dim
    per_layer = 6 * (attention_weights + mlp_weights) + 12 * attention_width * seq_len
    after_attention = 6 * (d * attention_width + mlp_weights)  # output projection and MLP
    return (cfg.n_layers * per_layer - (1 - last_block_fraction) * after_attention
            + 6 * d * cfg.vocab_size * predicted_fraction)


def objective_flops_per_token(cfg: ModelConfig, seq_len: int, objective, rows: int) -> float:
    """`flops_per_token` as `objective` trains on micro-batches of `rows` rows, with the
    models it trains beside it (ELECTRA's generator)."""
    companions = sum(flops_per_token(other, seq_len, share) for other, share
                     in objective.companion_models(cfg, rows, seq_len))
    return companions + flops_per_token(cfg, seq_len, objective.predicted_fraction(rows, seq_len),
                                        objective.last_block_fraction(rows, seq_len))
