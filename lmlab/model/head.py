"""What every output head is (lmlab.model.heads has the kinds): what it reads, how it shares
the input embedding, and how it starts."""

from __future__ import annotations

from collections.abc import Mapping

from torch import nn

from lmlab.config import ModelConfig
from lmlab.model.selectors import Positions


class Head(nn.Module):
    """An output head over the backbone's hidden states (B, T, d); a token head unless it says
    otherwise in `accepts`, the selectors (or None) it can be given as `at`. A head that
    `reads_inputs` is a model of its own over the input ids (a generator), called with the
    backbone's inputs instead of its states; it shares the input embedding whatever `cfg`
    says about tying."""

    accepts: tuple[type, ...] = (Positions, type(None))
    reads_inputs = False
    # Whether the model reads the embedding it shares through a stop-gradient and a residual
    # of its own (DeBERTa-v3's GDES, lmlab.model.sharing) rather than as it is.
    gradient_disentangled = False

    def tie(self, embedding: nn.Embedding) -> None:
        """Share the input embedding, when the model ties it; only vocabulary heads do."""

    def start_from(self, pretrained: Mapping[str, nn.Module], embedding: nn.Embedding) -> None:
        """Start, as a new head on a pre-trained backbone (whose token embedding is
        `embedding`), from what the `pretrained` heads (by name) learned that it shares; most
        heads share nothing and start fresh."""

    @classmethod
    def how_it_starts(cls, cfg: ModelConfig) -> str:
        """How `start_from` starts it when nothing pre-trained has it, in a few words."""
        return "fresh"

    def initialise(self) -> None:
        """Set what the model's generic initialisation (normal weights, zero biases) would
        start wrongly; it runs after that one. Most heads need nothing."""
