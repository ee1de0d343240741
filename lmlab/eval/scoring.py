"""Running a scoring rule over many documents in padded batches: per-document scores.

Documents are taken longest first, so rows of similar length share a batch; a batch holds
about `batch_tokens` tokens of rows, and at most LOGITS_PER_BATCH vocabulary logits (causal
rows read every position, so their logits, not their tokens, fill memory first). Each
vocabulary head runs only at the positions read.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor
from tqdm import tqdm

from lmlab.eval.rules import Chunk, ScoringRule
from lmlab.eval.windows import DEFAULT_BATCH_TOKENS, check_stride
from lmlab.model import LanguageModel, MaskSpec
from lmlab.model.selectors import Positions

LOGITS_PER_BATCH = 2**25  # 128 MB of float32 logits


@dataclass
class DocumentScores:
    rule: str
    description: str
    log_likelihood: np.ndarray  # (documents,) summed natural-log probabilities
    predictions: np.ndarray  # (documents,) tokens scored in each
    top1: np.ndarray  # (documents,) predictions whose most likely token was the right one
    seconds: float

    @property
    def tokens_per_second(self) -> float:
        return float(self.predictions.sum()) / max(self.seconds, 1e-9)


def default_stride(window: int) -> int:
    return max(1, window // 2)


def score_documents(model: LanguageModel, rule: ScoringRule, documents: Sequence,
                    stride: int | None = None, batch_tokens: int = DEFAULT_BATCH_TOKENS,
                    progress: bool = False) -> DocumentScores:
    """Score each document (token ids without [EOS]) under `rule`.

    Windows hold as many document tokens as the rule fits in the model's context and move by
    `stride` (default: half a window).
    """
    window = rule.window(model.cfg.max_seq_len)
    stride = default_stride(window) if stride is None else stride
    check_stride(window, stride)

    def chunks() -> Iterator[tuple[int, Chunk]]:  # the longest documents first
        for index in sorted(range(len(documents)), key=lambda i: -len(documents[i])):
            document = rule.document(torch.as_tensor(documents[index], dtype=torch.long))
            for chunk in rule.chunks(document, window, stride):
                yield index, chunk

    # Progress in tokens scored; a document never has more predictions than tokens.
    total = sum(len(d) for d in documents)
    return score_chunks(model, rule, chunks(), len(documents), total, batch_tokens, progress)


def score_chunks(model: LanguageModel, rule: ScoringRule, chunks: Iterable[tuple[int, Chunk]],
                 count: int, total: int, batch_tokens: int = DEFAULT_BATCH_TOKENS,
                 progress: bool = False) -> DocumentScores:
    """The scores of `count` documents from their (document index, chunk) pairs, which come
    longest first so rows of similar length share a batch; `total`: the tokens the progress
    bar counts."""
    if rule.head not in model.heads:
        raise ValueError(f"{rule.name} scoring needs the model's {rule.head!r} head")
    scores = DocumentScores(rule.name, rule.description, np.zeros(count),
                            np.zeros(count, dtype=np.int64), np.zeros(count, dtype=np.int64), 0.0)
    max_predictions = max(1, LOGITS_PER_BATCH // model.cfg.vocab_size)
    was_training = model.training
    model.eval()
    start = time.perf_counter()
    with torch.inference_mode(), tqdm(total=total, desc=f"{rule.name} scoring", unit="tok",
                                      unit_scale=True, disable=not progress) as bar:
        for batch in _batches(chunks, batch_tokens, max_predictions):
            owners = np.concatenate([np.full(len(c.targets), i) for i, c in batch])
            log_probs, right = _log_probs(model, rule, [c for _, c in batch])
            np.add.at(scores.log_likelihood, owners, log_probs.numpy())
            np.add.at(scores.predictions, owners, 1)
            np.add.at(scores.top1, owners, right.numpy())
            bar.update(len(owners))
        bar.update(bar.total - bar.n)  # special and first tokens count too, unscored
    model.train(was_training)
    scores.seconds = time.perf_counter() - start
    return scores


def _batches(chunks: Iterable[tuple[int, Chunk]], batch_tokens: int, max_predictions: int,
             ) -> Iterator[list[tuple[int, Chunk]]]:
    """(document index, part of a chunk) in batches of at most `batch_tokens` padded tokens
    and `max_predictions` predictions."""
    batch: list[tuple[int, Chunk]] = []
    predictions = 0
    for index, chunk in chunks:
        rows = min(batch_tokens // chunk.ids.shape[1], max_predictions)
        for part in chunk.split(max(1, rows)):
            if batch and (_padded_size(batch, part) > batch_tokens or
                          predictions + len(part.targets) > max_predictions):
                yield batch
                batch, predictions = [], 0
            batch.append((index, part))
            predictions += len(part.targets)
    if batch:
        yield batch


def _padded_size(pending: list[tuple[int, Chunk]], part: Chunk) -> int:
    rows = sum(len(c.ids) for _, c in pending) + len(part.ids)
    length = max(part.ids.shape[1], *(c.ids.shape[1] for _, c in pending))
    return rows * length


def _log_probs(model: LanguageModel, rule: ScoringRule, chunks: list[Chunk],
               ) -> tuple[Tensor, Tensor]:
    """log p(target) of every prediction of `chunks`, run as one right-padded batch, and
    whether the target was the most likely token there."""
    device = next(model.parameters()).device
    length = max(c.ids.shape[1] for c in chunks)
    pad = rule.special.padding_id
    ids = torch.cat([F.pad(c.ids, (0, length - c.ids.shape[1]), value=pad) for c in chunks])
    real = torch.cat([F.pad(torch.ones_like(c.ids), (0, length - c.ids.shape[1]))
                      for c in chunks])
    offsets = np.cumsum([0] + [len(c.ids) for c in chunks])
    flat = torch.cat([(offset + c.rows) * length + c.positions
                      for offset, c in zip(offsets, chunks, strict=False)])
    targets = torch.cat([c.targets for c in chunks])
    prefix_len = torch.cat([c.prefix_len for c in chunks]) if rule.attention == "prefix" else None
    segments = None if bool(real.all()) else real  # padding is segment 0
    mask = MaskSpec(rule.attention, prefix_len, segments).to(device)
    positions = torch.arange(length, device=device).expand(len(ids), length)
    outputs = model(ids.to(device), mask, positions,
                    predict_at={rule.head: Positions(flat.to(device))})
    logits = outputs[rule.head].float()
    target_logits = logits.gather(1, targets[:, None].to(device)).squeeze(1)
    right = logits.argmax(dim=-1).cpu() == targets
    return (target_logits - torch.logsumexp(logits, dim=-1)).double().cpu(), right
