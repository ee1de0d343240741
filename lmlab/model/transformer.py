"""The backbone: embeddings → blocks → final norm. It never knows the objective."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from lmlab.config import ModelConfig
from lmlab.model.attention import KVCache, SelfAttention
from lmlab.model.layers import MLP, Rotary, bigram_rows, gather_rows, make_norm, value_table
from lmlab.model.masks import MaskSpec


class Block(nn.Module):
    """Attention then MLP, each with a residual; the norm sits before (pre) or after (post)."""

    def __init__(self, cfg: ModelConfig, layer_index: int) -> None:
        super().__init__()
        self.pre_norm = cfg.norm_placement == "pre"
        self.attn_norm, self.mlp_norm = make_norm(cfg), make_norm(cfg)
        if self.pre_norm and cfg.embedding_norm and layer_index == 0:
            self.attn_norm = nn.Identity()  # its input, the embeddings, is normalised already
        self.attn = SelfAttention(cfg, layer_index)
        self.mlp = MLP(cfg)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: Tensor, mask: MaskSpec, rotary, cache: KVCache | None,
                keep: Tensor | None = None, values: Tensor | None = None) -> Tensor:
        """(B, T, d) → (B, T, d); with `keep` (flat positions), (N, d) at those positions:
        everything after attention runs on them alone. `values`: the attention's value
        embeddings, when it reads a table."""
        if self.pre_norm:  # GPT-2, LLaMA: normalise the branch input, keep the stream raw
            x = gather_rows(x, keep) + self.dropout(
                self.attn(self.attn_norm(x), mask, rotary, cache, keep, values))
            return x + self.dropout(self.mlp(self.mlp_norm(x)))
        # BERT: normalise the stream after each residual sum
        x = self.attn_norm(gather_rows(x, keep) + self.dropout(
            self.attn(x, mask, rotary, cache, keep, values)))
        return self.mlp_norm(x + self.dropout(self.mlp(x)))


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.token_embedding = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.position_embedding = (
            nn.Embedding(cfg.max_seq_len, cfg.d_model) if cfg.positions == "learned" else None
        )
        self.rotary = Rotary(cfg) if cfg.positions == "rotary" else None
        self.token_type_embedding = (
            nn.Embedding(cfg.type_vocab_size, cfg.d_model) if cfg.type_vocab_size else None
        )
        # Post-norm models normalise the embeddings (each block ends normalised); pre-norm
        # models leave the residual stream raw (ModernBERT: all but the embeddings) and
        # normalise once at the end.
        post = cfg.norm_placement == "post"
        self.embedding_norm = make_norm(cfg) if post or cfg.embedding_norm else nn.Identity()
        self.final_norm = nn.Identity() if post else make_norm(cfg)
        self.dropout = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg, i) for i in range(cfg.n_layers))
        # U-net skips (modded-nanogpt, Jordan et al. 2024): the stream after block i of the
        # first half joins the input of block n_layers-1-i, times a learnt weight that starts
        # at 1, as there; with an odd count the middle block has no partner.
        self.skip_weights = (nn.Parameter(torch.ones(cfg.n_layers // 2))
                             if cfg.unet_skips else None)
        # Value embeddings (modded-nanogpt): token tables whose vectors join the attention values
        # of layers j and n_layers-1-j (lmlab.model.layers.value_table), at the values' width.
        self.value_embeddings = nn.ModuleList(
            nn.Embedding(cfg.vocab_size, cfg.kv_heads * cfg.head_dim)
            for _ in range(cfg.value_embeddings))
        # Bigram hash embedding (modded-nanogpt): a table read at a hash of each token and the
        # one before it (lmlab.model.layers.bigram_rows), added to the token embedding.
        self.bigram_embedding = (nn.Embedding(cfg.bigram_hash, cfg.d_model)
                                 if cfg.bigram_hash else None)
        # Recompute each block's activations in the backward pass instead of keeping them:
        # memory for a longer context or a bigger batch, paid with about one more forward.
        self.checkpoint_blocks = False

    def forward(self, input_ids: Tensor, mask: MaskSpec, positions: Tensor | None = None,
                token_type_ids: Tensor | None = None, cache: KVCache | None = None,
                keep: Tensor | None = None) -> Tensor:
        """(B, T) ids → (B, T, d_model) hidden states; with `keep` (flat positions into B·T),
        (N, d_model) at those positions only. The last block computes no other position's
        output (its attention still reads every position): for MLM, 85% of that block's
        projection and MLP products are never needed."""
        length = input_ids.shape[1]
        if positions is None:
            start = cache.length if cache is not None else 0
            if start + length > self.cfg.max_seq_len:
                raise ValueError(f"{start + length} tokens exceed the model's context of "
                                 f"{self.cfg.max_seq_len}")
            positions = torch.arange(start, start + length, device=input_ids.device)  # (T,)
        x = self.token_embedding(input_ids)
        if self.bigram_embedding is not None:
            previous = cache.last_ids if cache is not None else None
            x = x + self.bigram_embedding(bigram_rows(input_ids, self.cfg.bigram_hash, previous,
                                                      mask.segment_ids))
        if self.position_embedding is not None:
            x = x + self.position_embedding(positions)
        if self.token_type_embedding is not None:
            types = token_type_ids if token_type_ids is not None else torch.zeros_like(input_ids)
            x = x + self.token_type_embedding(types)
        x = self.dropout(self.embedding_norm(x))
        rotary = self.rotary(positions) if self.rotary is not None else None
        tables = [table(input_ids) for table in self.value_embeddings]  # each (B, T, kvh·hs)
        x = self._blocks(x, mask, rotary, cache, keep, tables)
        if cache is not None:
            cache.advance(input_ids)
        return self.final_norm(x)

    def _blocks(self, x: Tensor, mask: MaskSpec, rotary, cache: KVCache | None,
                keep: Tensor | None, tables: list[Tensor]) -> Tensor:
        """(B, T, d) through every block, each reading its value-embedding table, if any, of
        `tables`; the last computes only the `keep` rows."""
        recompute = self.checkpoint_blocks and self.training and torch.is_grad_enabled()
        last = len(self.blocks) - 1
        skips = 0 if self.skip_weights is None else len(self.skip_weights)
        saved = []  # the stream after each of the first `skips` blocks
        for index, block in enumerate(self.blocks):
            if last - index < skips:  # partner of block last - index, saved last in, first out
                x = x + self.skip_weights[last - index] * saved.pop()
            rows = keep if index == last else None
            table = value_table(self.cfg, index)
            values = tables[table] if table is not None else None
            if recompute:
                x = checkpoint(block, x, mask, rotary, cache, rows, values, use_reentrant=False)
            else:
                x = block(x, mask, rotary, cache, rows, values)
            if index < skips:
                saved.append(x)
        return x
