"""A dataset as training sees it: token streams for train and validation, the special-token
ids, word-start flags, and the bytes of text per token (for bits per byte)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer
from torch import Tensor

from lmlab.data.errors import DataError
from lmlab.data.loader import ArraySource, TokenSource
from lmlab.data.shards import TokenFile
from lmlab.data.special_tokens import SpecialTokens
from lmlab.data.tokenizer import special_tokens_of, word_start_table


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
    """A Dataset from token-id documents held in memory; each gets an [EOS] appended (when
    the tokenizer has one)."""

    def source(documents: list[np.ndarray]) -> ArraySource:
        ender = np.array(special.present("eos"), dtype=np.int64)
        ended = [np.concatenate((np.asarray(d, dtype=np.int64), ender)) for d in documents]
        stops = np.cumsum([len(d) for d in ended])
        spans = np.stack((stops - [len(d) for d in ended], stops), axis=1)
        return ArraySource(np.concatenate(ended), spans)

    return Dataset(special, source(train_documents), source(validation_documents),
                   bytes_per_token, word_starts=torch.ones(special.vocab_size, dtype=torch.bool))


def open_dataset(path: Path) -> Dataset:
    """A prepared dataset directory, checked for completeness."""
    path = Path(path)
    if path.is_file():
        raise DataError(f"{path} is a file, not a prepared dataset; make one from it with "
                        f"`lmlab prepare {path} --out DIR` and pass --data DIR")
    if not path.is_dir():
        raise DataError(f"dataset directory {path} does not exist; create it with lmlab prepare")
    meta_path = path / "meta.json"
    if not meta_path.is_file():
        raise DataError(f"{path} is not a complete prepared dataset (no meta.json)")
    meta = json.loads(meta_path.read_text())
    tokenizer_path = path / "tokenizer.json"
    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    # a reused tokenizer's roles, as prepare recorded them (None: lmlab's names)
    names = meta.get("tokenizer", {}).get("special_tokens")
    special = special_tokens_of(tokenizer, str(tokenizer_path), names)
    splits = meta["splits"]
    validation = splits["validation"]
    return Dataset(
        special=special,
        train=TokenFile(path, "train", splits["train"]["dtype"]),
        validation=TokenFile(path, "validation", validation["dtype"]),
        bytes_per_token=validation["bytes"] / max(validation["tokens"], 1),
        word_starts=word_start_table(tokenizer),
        tokenizer_json=tokenizer_path.read_text(),
        path=path,
    )
