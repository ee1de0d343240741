"""Text embeddings: the final hidden states of a text, pooled into one vector.

Pooling `mean` averages over the text's own tokens (not padding, not the [EOS]/[CLS]/[SEP]
the layout adds); `mean-all` over every token the model read, those included (as
sentence-transformers pools); `cls` takes the first position, which is [CLS] for models
trained with NSP and the first token otherwise. A run imported from sentence-transformers
records its own pooling, normalisation and text length (config.json's `embedding`), used
unless others are asked for; any other run pools by `mean-all`, the ecosystem's mean, so that
its sentence-transformers export computes what `lmlab embed` does. Texts are read with the
attention the model was trained with: bidirectional, unless it was trained only causally.
Batches are padded on the right and the padding is masked out of attention, so a text's
embedding does not depend on its batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from lmlab.atomic import atomic_write
from lmlab.infer.choices import POOLINGS
from lmlab.model import MaskSpec
from lmlab.runs import Run
from lmlab.runs.reading import Text, as_batch, encode, pad_right, reading_document
from lmlab.runs.schema import Embedding


def embedding_reading(run: Run, pooling: str | None = None,
                      normalize: bool | None = None) -> tuple[str, bool]:
    """(pooling, normalize): those given, else those the run records, else mean-all (every
    token read: as sentence-transformers pools, and as fine-tuning's mean pools), unscaled."""
    recorded = run.config.embedding or Embedding()
    pooling = pooling or recorded.pooling or "mean-all"
    if pooling not in POOLINGS:
        raise ValueError(f"unknown pooling {pooling!r}; choose from {', '.join(POOLINGS)}")
    return pooling, bool(recorded.normalize) if normalize is None else normalize


def embed(run: Run, texts: Text | Sequence[Text], pooling: str | None = None,
          normalize: bool | None = None, batch_size: int = 32) -> np.ndarray:
    """(d_model,) float32 for one text, (N, d_model) for a list; `normalize` scales each to
    unit length (cosine similarity is then a dot product). None: as `embedding_reading`."""
    pooling, normalize = embedding_reading(run, pooling, normalize)
    causal = run.objective.reads_causally
    if pooling == "cls" and causal:
        raise ValueError(f"{run.path}: cls pooling reads the first position, which a "
                         "causal model computes from the first token alone; use mean pooling")
    items, single = as_batch(texts)
    documents = []
    for index, item in enumerate(items):
        ids = encode(run, item)
        if not ids:
            raise ValueError(f"text {index + 1} is empty")
        documents.append(reading_document(run, _cut(run, ids)))
    vectors = []
    starts = range(0, len(documents), batch_size)
    for start in tqdm(starts, desc="embed", unit="batch", disable=len(starts) < 2):
        chunk = documents[start: start + batch_size]
        vectors.append(_embed_batch(run, chunk, pooling, causal))
    out = torch.cat(vectors)
    if normalize:
        out = torch.nn.functional.normalize(out, dim=-1)
    array = out.cpu().numpy().astype(np.float32)
    return array[0] if single else array


def _cut(run: Run, ids: list[int]) -> list[int]:
    """The text cut to the length the run records for embeddings, its framing included (as
    sentence-transformers cuts texts to max_seq_length); whole when none is recorded."""
    max_len = (run.config.embedding or Embedding()).max_len
    if max_len is None:
        return ids
    return ids[: max(1, max_len - len(reading_document(run, [])[0]))]


@torch.inference_mode()
def _embed_batch(run: Run, documents: list[tuple[list[int], slice]],
                 pooling: str, causal: bool) -> torch.Tensor:
    ids, segments = pad_right([ids for ids, _ in documents], run.special.padding_id)
    ids, segments = ids.to(run.device), segments.to(run.device)
    kind = "causal" if causal else "bidirectional"
    hidden = run.model(ids, MaskSpec(kind, segment_ids=segments), predict_at={})["hidden"]
    hidden = hidden.float()  # (B, T, d)
    if pooling == "cls":
        return hidden[:, 0]
    pooled = segments > 0  # mean-all: every token read
    if pooling == "mean":
        pooled = torch.zeros_like(pooled)
        for row, (_, span) in enumerate(documents):
            pooled[row, span] = True
    weights = pooled.unsqueeze(-1).float()
    return (hidden * weights).sum(dim=1) / weights.sum(dim=1)


def save_npy(array: np.ndarray, path: str | Path) -> None:
    """Write `array` to `path` atomically: a reader sees the old file or the whole new one."""
    array = np.ascontiguousarray(array)
    with atomic_write(path, "wb") as f:
        # np.save's own write to a file says neither why it failed nor its errno; Python's does.
        np.lib.format.write_array_header_1_0(f, np.lib.format.header_data_from_array_1_0(array))
        f.write(array)  # its bytes, in C order
