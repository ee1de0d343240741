"""Perplexity, pseudo-perplexity and bits per byte of a text under each scoring rule.

Perplexity is exp(total nats / tokens scored) and depends on the tokenizer; bits per byte,
total nats / ln 2 / UTF-8 bytes of the whole text (given tokens included), does not, so it
compares models with different vocabularies. For pseudo-log-likelihood rules the same formulas give
pseudo-perplexity (Salazar et al. 2020) and pseudo bits per byte.
"""

from __future__ import annotations

import math

from lmlab.eval.rules import ScoringRule
from lmlab.eval.scoring import default_stride, score_documents
from lmlab.eval.texts import EvalText
from lmlab.eval.windows import DEFAULT_BATCH_TOKENS
from lmlab.model import LanguageModel


def bits_per_byte(nats: float, n_bytes: int) -> float:
    return nats / math.log(2) / n_bytes


def text_metrics(model: LanguageModel, rule: ScoringRule, text: EvalText,
                 stride: int | None = None, batch_tokens: int = DEFAULT_BATCH_TOKENS,
                 progress: bool = False) -> dict:
    if not text.documents or text.bytes == 0:
        raise ValueError(f"{text.source}: no text to evaluate")
    window = rule.window(model.cfg.max_seq_len)
    stride = default_stride(window) if stride is None else stride
    scores = score_documents(model, rule, text.documents, stride, batch_tokens, progress)
    nats = -float(scores.log_likelihood.sum())
    count = int(scores.predictions.sum())
    loss = nats / max(count, 1)
    return {
        "rule": rule.name, "description": rule.description, "metric": rule.perplexity_name,
        "window": window, "stride": stride, "documents": len(text.documents),
        "tokens_scored": count, "bytes": text.bytes, "nats": nats, "loss": loss,
        "perplexity": math.exp(min(loss, 700.0)),
        "bits_per_byte": bits_per_byte(nats, text.bytes),
        "seconds": scores.seconds, "tokens_per_second": scores.tokens_per_second,
    }
