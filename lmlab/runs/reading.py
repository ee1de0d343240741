"""The one reading of text "as the run was trained": user input (text or token ids) → token
rows laid out as training laid them out, for every command that reads text with a run
(inference, evaluation, fine-tuning's predictions, the server).

A text given for reading (fill-mask, embeddings) becomes one document as the run's objective
framed them in training (lmlab.tasks.framing, the one framing of rows).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import torch
from torch import Tensor

from lmlab.runs.run import Run
from lmlab.tasks.framing import frame_tokens

# One input: a text, or the token ids of one text (for runs without a tokenizer).
Text = str | Sequence[int] | Tensor

MASK_TEXT = "[MASK]"


def is_one(inputs) -> bool:
    """A single text (or id sequence), as opposed to a list of them."""
    if isinstance(inputs, str):
        return True
    if isinstance(inputs, Tensor):
        return inputs.ndim == 1
    return len(inputs) > 0 and all(isinstance(item, int) for item in inputs)


def as_batch(inputs) -> tuple[list, bool]:
    """(list of inputs, whether a single one was given)."""
    if is_one(inputs):
        return [inputs], True
    if not len(inputs):
        raise ValueError("no texts given")
    return list(inputs), False


def absorb_space_before(text: str, marker: str) -> str:
    """Drop the space before `marker`: byte-level BPE attaches a word's leading space to the
    word itself ("Ġfox"), so a marker standing for a word stands for its space too."""
    return re.sub(" " + re.escape(marker), marker, text)


def encode(run: Run, item: Text) -> list[int]:
    """Token ids of one text; ids given directly are checked against the vocabulary."""
    if isinstance(item, str):
        # As prepare encoded the training text: no post-processor's [CLS] ... [SEP].
        return run.require_tokenizer().encode(item, add_special_tokens=False).ids
    ids = item.tolist() if isinstance(item, Tensor) else [int(i) for i in item]
    vocab_size = run.special.vocab_size
    outside = [i for i in ids if not 0 <= i < vocab_size]
    if outside:
        raise ValueError(f"token id {outside[0]} is outside the vocabulary (0..{vocab_size - 1})")
    return ids


def parse_ids(text: str, mask_id: int | None = None) -> list[int]:
    """`"7 8 [MASK] 10"` → [7, 8, mask_id, 10]: token ids typed on the command line."""
    ids = []
    for word in text.replace(",", " ").split():
        if word == MASK_TEXT and mask_id is not None:
            ids.append(mask_id)
        elif word.isdigit():
            ids.append(int(word))
        else:
            raise ValueError(f"{word!r} is not a token id (expected numbers such as '7 8 9')")
    return ids


def reading_document(run: Run, ids: list[int]) -> tuple[list[int], slice]:
    """One text as the model read documents in training, and where the text lies in it."""
    before, after = frame_tokens(run.special, run.objective.framing)
    return [*before, *ids, *after], slice(len(before), len(before) + len(ids))


def pad_right(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[Tensor, Tensor]:
    """(ids, segment_ids), both (B, T): rows padded at the end; segment 0 marks padding."""
    length = max(len(row) for row in rows)
    ids = torch.full((len(rows), length), pad_id, dtype=torch.long)
    segments = torch.zeros((len(rows), length), dtype=torch.long)
    for index, row in enumerate(rows):
        ids[index, : len(row)] = torch.tensor(row, dtype=torch.long)
        segments[index, : len(row)] = 1
    return ids, segments


def pad_left(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[Tensor, Tensor, Tensor]:
    """(ids, segment_ids, positions), all (B, T): rows padded at the start so that every
    row's last token is at the end, as incremental decoding needs; positions count from
    each row's first real token."""
    length = max(len(row) for row in rows)
    ids = torch.full((len(rows), length), pad_id, dtype=torch.long)
    segments = torch.zeros((len(rows), length), dtype=torch.long)
    for index, row in enumerate(rows):
        ids[index, length - len(row):] = torch.tensor(row, dtype=torch.long)
        segments[index, length - len(row):] = 1
    positions = (segments.cumsum(dim=1) - 1).clamp(min=0)
    return ids, segments, positions
