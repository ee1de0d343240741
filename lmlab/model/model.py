"""LanguageModel = Transformer backbone + a dict of heads; `forward` is the only entry point."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from torch import Tensor, nn

from lmlab.config import ModelConfig
from lmlab.model.attention import KVCache
from lmlab.model.heads import Head, VocabularyHead, make_head
from lmlab.model.masks import MaskSpec
from lmlab.model.selectors import Positions, Selector, describe
from lmlab.model.sharing import DisentangledEmbedding
from lmlab.model.transformer import Transformer


class LanguageModel(nn.Module):
    """`heads` maps names to configured Head modules; names alone build the standard heads
    (lm, mlm, nsp) from `cfg`. Vocabulary heads share the input embedding when `cfg` ties it;
    a generator always shares it, under GDES read by the backbone through a residual
    (lmlab.model.sharing). Every weight is initialised here, heads included."""

    def __init__(self, cfg: ModelConfig,
                 heads: Iterable[str] | Mapping[str, Head] = ("lm",)) -> None:
        super().__init__()
        self.cfg = cfg
        self.backbone = Transformer(cfg)
        if not isinstance(heads, Mapping):
            heads = {name: make_head(name, cfg) for name in heads}
        self.heads = nn.ModuleDict(heads)
        if any(head.gradient_disentangled for head in self.heads.values()):
            self.backbone.token_embedding = DisentangledEmbedding(self.backbone.token_embedding)
        for head in self.heads.values():
            if cfg.tie_embeddings or head.reads_inputs:
                head.tie(self.backbone.token_embedding)
        self.apply(self._init_weights)
        for head in self.heads.values():
            head.initialise()
        # GPT-2: scale residual-branch outputs by 1/sqrt(2·layers) so the stream's variance
        # does not grow with depth; or start them at zero, each block the identity at first
        # (modded-nanogpt), its input projections still random so gradients reach them.
        std = 0.0 if cfg.zero_init_projections else cfg.init_std / math.sqrt(2 * cfg.n_layers)
        for block in self.backbone.blocks:
            for proj in (block.attn.out, block.mlp.down):
                nn.init.normal_(proj.weight, std=std)

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, nn.Linear | nn.Embedding):
            nn.init.normal_(module.weight, std=self.cfg.init_std)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, input_ids: Tensor, mask: MaskSpec, positions: Tensor | None = None,
                token_type_ids: Tensor | None = None,
                predict_at: Mapping[str, Selector | None] | None = None,
                cache: KVCache | None = None, unprojected: bool = False) -> dict:
        """Run the backbone, then each requested head.

        `predict_at` maps a head name to what it reads (lmlab.model.selectors: `Positions`,
        `Rows`, `Pooling`, or None for everything), each head accepting its own kinds; by
        default every head runs everywhere; heads that read the inputs (a generator) run on
        them, the backbone only when another head needs it. Returns each head's logits under
        its name; with `unprojected`, vocabulary heads return `Unprojected` features for a
        fused loss instead of logits. The final hidden states are under "hidden", (B, T, d),
        except when one token head alone runs at chosen positions (MLM): the backbone then
        computes its last outputs at those positions only, and they are under "hidden_rows",
        (N, d), instead.
        """
        requests = predict_at if predict_at is not None else dict.fromkeys(self.heads)
        for name, at in requests.items():
            self._check_request(name, at)
        outputs = {name: self.heads[name](input_ids, mask, positions, token_type_ids, at)
                   for name, at in requests.items() if self.heads[name].reads_inputs}
        requests = {name: at for name, at in requests.items() if name not in outputs}
        if outputs and not requests:  # input readers alone: the backbone is not needed
            return outputs
        keep = self._only_rows_read(requests)
        hidden = self.backbone(input_ids, mask, positions, token_type_ids, cache,
                               None if keep is None else keep.flat)
        outputs["hidden" if keep is None else "hidden_rows"] = hidden
        for name, at in requests.items():
            head, at = self.heads[name], None if keep is not None else at
            outputs[name] = (head(hidden, at, unprojected=True)
                             if unprojected and isinstance(head, VocabularyHead)
                             else head(hidden, at))
        return outputs

    def _check_request(self, name: str, at: Selector | None) -> None:
        if name not in self.heads:
            raise ValueError(f"this model has no {name!r} head (it has {list(self.heads)})")
        head = self.heads[name]
        if not isinstance(at, head.accepts):
            raise ValueError(f"the {name!r} head ({type(head).__name__}) reads "
                             f"{describe(head.accepts)}; it was given {describe([type(at)])}")

    @staticmethod
    def _only_rows_read(requests: Mapping[str, Selector | None]) -> Positions | None:
        """The positions read, when a single token head reads chosen positions only."""
        if len(requests) != 1:
            return None
        (at,) = requests.values()
        return at if isinstance(at, Positions) else None

    def tied_heads(self) -> list[str]:
        """The heads whose decoder is the token embedding itself (a generator's aside: it
        shares the table whatever the model ties)."""
        table = self.backbone.token_embedding.weight
        return [name for name, head in self.heads.items()
                if isinstance(head, VocabularyHead) and not head.reads_inputs
                and head.decoder.weight is table]

    def untie(self) -> dict[nn.Parameter, nn.Parameter]:
        """Give each of the `tied_heads` a decoder of its own, a copy of the token embedding,
        and read the model as untied from here on (modded-nanogpt unties its head late in a
        run). Returns each new decoder weight with the table it copies."""
        table = self.backbone.token_embedding.weight
        copies = {}
        for name in self.tied_heads():
            decoder = self.heads[name].decoder
            decoder.weight = nn.Parameter(table.detach().clone())
            copies[decoder.weight] = table
        self.cfg = self.backbone.cfg = self.cfg.with_changes(tie_embeddings=False)
        return copies

    def num_parameters(self, include_embeddings: bool = True) -> int:
        total = sum(p.numel() for p in self.parameters())
        if not include_embeddings:
            tables = (self.backbone.token_embedding, self.backbone.value_embeddings,
                      self.backbone.bigram_embedding)
            total -= sum(p.numel() for table in tables if table is not None
                         for p in table.parameters())
        return total
