"""The Batch an objective makes: model inputs, attention policy and targets of one micro-batch,
and its copy to the device."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch
from torch import Tensor

from lmlab.model.masks import MaskSpec
from lmlab.model.selectors import Positions, Selector


@dataclass
class Batch:
    """Model inputs, attention policy and targets for one micro-batch.

    `predict_at` maps each head to what it must read (lmlab.model.selectors: Positions,
    Rows, Pooling, or None for everything). `targets` holds the target id at each position,
    IGNORE_INDEX elsewhere.
    """

    input_ids: Tensor  # (B, T)
    mask: MaskSpec
    positions: Tensor  # (B, T), or (T,) when every row is one document from position 0
    targets: Tensor  # (B, T)
    predict_at: dict[str, Selector | None]
    token_type_ids: Tensor | None = None
    extras: dict[str, Tensor] = field(default_factory=dict)
    # What the host decides by (which objective made the batch): kept off the device, so
    # reading it never waits for one.
    host_facts: dict[str, int] = field(default_factory=dict)

    def model_inputs(self) -> dict:
        return dict(input_ids=self.input_ids, mask=self.mask, positions=self.positions,
                    token_type_ids=self.token_type_ids, predict_at=self.predict_at)

    def rows(self, start: int, stop: int) -> Batch:
        """The sub-batch of rows [start, stop), e.g. one micro-batch of a larger batch."""
        length = self.input_ids.shape[1]
        cut = lambda t: None if t is None else t[start:stop]  # noqa: E731
        predict_at = {head: None if at is None else at.rows(start, stop, length)
                      for head, at in self.predict_at.items()}
        return Batch(
            input_ids=cut(self.input_ids), mask=self.mask.rows(start, stop),
            positions=self.positions if self.positions.ndim == 1 else cut(self.positions),
            targets=cut(self.targets), predict_at=predict_at,
            token_type_ids=cut(self.token_type_ids),
            extras={k: cut(v) if v.ndim else v for k, v in self.extras.items()},
            host_facts=self.host_facts,
        )

    def with_positions_padded(self, bound: int) -> Batch:
        """The batch with each head's `Positions` padded to `bound` entries (to every
        position in the rare batch that holds more), so that a compiled step sees one shape:
        padding reads no target. A head that reads nothing stays so."""
        every = self.input_ids.numel()

        def pad(at: Selector | None) -> Selector | None:
            if not isinstance(at, Positions) or not at.flat.numel():
                return at
            return at.padded(bound if at.flat.numel() <= bound else every)

        return replace(self, predict_at={head: pad(at) for head, at in self.predict_at.items()})

    def token_count(self) -> int:
        """Tokens in the batch, padding left out."""
        segments = self.mask.segment_ids
        return int((segments > 0).sum()) if segments is not None else self.input_ids.numel()

    def to(self, device: torch.device | str) -> Batch:
        """The batch on `device`, copied without waiting (`to_device`)."""
        return self._mapped(lambda t: to_device(t, device), device)

    def pinned(self) -> Batch:
        """The batch in pinned host memory, ready for copies to a GPU that do not wait."""
        return self._mapped(lambda t: t if t.is_pinned() else t.contiguous().pin_memory(),
                            "cpu")

    def _mapped(self, fn, device: torch.device | str) -> Batch:
        """The batch with `fn` applied to each of its tensors, now on `device`."""
        def move(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else fn(t)

        return replace(
            self, input_ids=move(self.input_ids), mask=self.mask.to(device, move),
            positions=move(self.positions), targets=move(self.targets),
            token_type_ids=move(self.token_type_ids),
            predict_at={k: None if v is None else v.map(move)
                        for k, v in self.predict_at.items()},
            extras={k: move(v) for k, v in self.extras.items()},
        )


def to_device(tensor: Tensor, device: torch.device | str) -> Tensor:
    """`tensor` on `device`. Copies to a GPU start from pinned host memory and do not wait,
    so the host goes on queueing the step while they run (a plain copy from pageable memory
    would wait for the GPU's queue to drain first). An expanded tensor (positions shared by
    every row) is made whole first: pinning refuses one whose elements share memory."""
    if torch.device(device).type == "cuda" and tensor.device.type == "cpu" \
            and not tensor.is_pinned():
        tensor = tensor.contiguous().pin_memory()
    return tensor.to(device, non_blocking=True)
