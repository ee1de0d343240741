"""Fill-mask: the most likely tokens, with probabilities, for each [MASK] in a text.

Each text is read as one document, bidirectionally, as masked-LM training read it; every mask
of a text is predicted in the same forward pass (independently of the others, as in BERT).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from tqdm import tqdm

from lmlab.model import MaskSpec
from lmlab.model.selectors import Positions
from lmlab.runs import Run
from lmlab.runs.reading import (
    MASK_TEXT,
    Text,
    absorb_space_before,
    as_batch,
    encode,
    pad_right,
    reading_document,
)


@dataclass(frozen=True)
class FilledToken:
    token: str  # the token's text, with its leading space if it has one (" fox")
    id: int
    probability: float


def _shown(text: Text, limit: int = 40) -> str:
    shown = text if isinstance(text, str) else " ".join(map(str, list(text)))
    return repr(shown if len(shown) <= limit else shown[: limit - 1] + "…")


def _token_text(run: Run, token_id: int) -> str:
    if run.tokenizer is None:
        return str(token_id)
    return run.tokenizer.decode([token_id], skip_special_tokens=False)


def fill_mask(run: Run, texts: Text | Sequence[Text], top_k: int = 5,
              batch_size: int = 32) -> list[list[FilledToken]] | list[list[list[FilledToken]]]:
    """For each text, for each of its masks in order, the `top_k` candidates, best first.

    `texts` is one text or a list; texts contain "[MASK]" (or, as ids, the mask id). Returns
    the list of masks of one text, or one such list per text.
    """
    if run.objective.fill_mask_head is None:
        raise ValueError(f"{run.path}: the model has no masked-LM head (trained with "
                         f"{run.spec}); fill-mask needs a model trained with mlm, "
                         "mlm+nsp, mntp or a mix including one of them")
    if run.objective.fill_mask_head[0] not in run.model.heads:
        raise ValueError(f"{run.path}: the model was saved without its masked-LM head (as "
                         "encoders for embeddings are); it can embed and be fine-tuned, not "
                         "fill masks")
    mask = run.special.require("mask", "fill-mask")
    if top_k < 1:
        raise ValueError(f"top_k must be at least 1, got {top_k}")
    items, single = as_batch(texts)
    rows = []
    for index, item in enumerate(items):
        text = absorb_space_before(item, MASK_TEXT) if isinstance(item, str) else item
        ids = encode(run, text)
        if mask not in ids:
            raise ValueError(f"text {index + 1} has no {MASK_TEXT} token: {_shown(item)}")
        row = reading_document(run, ids)[0]
        if run.objective.fill_mask_head[1] and row[0] == mask:
            raise ValueError(f"text {index + 1} starts with {MASK_TEXT}: this masked next-token "
                             "(mntp) model predicts each token from the one before it; put a "
                             f"token before the first mask: {_shown(item)}")
        rows.append(row)
    results = []
    starts = range(0, len(rows), batch_size)
    for start in tqdm(starts, desc="fill-mask", unit="batch", disable=len(starts) < 2):
        results.extend(_fill_batch(run, rows[start: start + batch_size], top_k))
    return results[0] if single else results


@torch.inference_mode()
def _fill_batch(run: Run, rows: list[list[int]],
                top_k: int) -> list[list[list[FilledToken]]]:
    ids, segments = pad_right(rows, run.special.padding_id)
    ids, segments = ids.to(run.device), segments.to(run.device)
    is_mask = ids == run.special.mask
    head, shift = run.objective.fill_mask_head
    at = Positions.where(is_mask).map(lambda flat: flat - shift)
    logits = run.model(ids, MaskSpec("bidirectional", segment_ids=segments),
                              predict_at={head: at})[head]  # (masks, V)
    probabilities, token_ids = logits.float().softmax(dim=-1).topk(
        min(top_k, logits.shape[-1]), dim=-1)
    masks_per_row = is_mask.sum(dim=1).tolist()
    flat = [[FilledToken(_token_text(run, token), token, probability)
             for token, probability in zip(tokens, probs, strict=True)]
            for tokens, probs in zip(token_ids.tolist(), probabilities.tolist(), strict=True)]
    grouped, cursor = [], 0
    for count in masks_per_row:
        grouped.append(flat[cursor: cursor + count])
        cursor += count
    return grouped
