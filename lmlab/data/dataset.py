"""A dataset as training sees it: token streams for train and validation, the special-token
ids, word-start flags, and the bytes of text per token (for bits per byte)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from lmlab.data.loader import ArraySource, TokenSource
from lmlab.objectives.base import SpecialTokens


@dataclass
class Dataset:
    special: SpecialTokens
    train: TokenSource
    validation: TokenSource
    bytes_per_token: float
    word_starts: Tensor | None = None
    tokenizer_json: str | None = None
    path: Path | None = None


def in_memory_dataset(train_documents: list[np.ndarray], validation_documents: list[np.ndarray],
                      special: SpecialTokens, bytes_per_token: float = 1.0) -> Dataset:
    """A Dataset from token-id documents held in memory; each gets an [EOS] appended."""

    def source(documents: list[np.ndarray]) -> ArraySource:
        ended = [np.append(np.asarray(d, dtype=np.int64), special.eos) for d in documents]
        stops = np.cumsum([len(d) for d in ended])
        spans = np.stack((stops - [len(d) for d in ended], stops), axis=1)
        return ArraySource(np.concatenate(ended), spans)

    return Dataset(special, source(train_documents), source(validation_documents),
                   bytes_per_token, word_starts=torch.ones(special.vocab_size, dtype=torch.bool))
