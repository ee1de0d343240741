"""What a prepared dataset holds, as numbers for meta.json and as a report a person reads.

Token statistics are accumulated chunk by chunk in fixed-size arrays (one counter per
vocabulary entry, one per power-of-two length bucket), so they cost no memory per document.
"""

from __future__ import annotations

import numpy as np
from tokenizers import Tokenizer

LENGTH_BUCKETS = 40  # documents of up to 2**40 tokens
TOP_TOKENS = 20


class TokenStats:
    """Token frequencies and the tokens-per-document histogram of one split."""

    def __init__(self, vocab_size: int) -> None:
        self.frequencies = np.zeros(vocab_size, dtype=np.int64)
        self.length_buckets = np.zeros(LENGTH_BUCKETS + 1, dtype=np.int64)

    def add(self, flat: np.ndarray, lengths: np.ndarray) -> None:
        """`flat`: documents back to back, each with its [EOS]; `lengths` include the [EOS]."""
        self.frequencies += np.bincount(flat, minlength=len(self.frequencies))
        text_tokens = lengths - 1
        # Bucket 0 holds empty documents, bucket k ≥ 1 lengths in [2**(k-1), 2**k).
        buckets = np.zeros(len(text_tokens), dtype=np.int64)
        nonzero = text_tokens > 0
        buckets[nonzero] = np.floor(np.log2(text_tokens[nonzero])).astype(np.int64) + 1
        self.length_buckets += np.bincount(buckets, minlength=len(self.length_buckets))


def token_summary(stats: list[TokenStats], tokenizer: Tokenizer, skip: set[int]) -> dict:
    """The histogram and the most frequent tokens over all splits; `skip` the ids not to rank
    (the [EOS] that ends every document)."""
    frequencies = sum(s.frequencies for s in stats)
    buckets = sum(s.length_buckets for s in stats)
    histogram = [{"from": 0 if k == 0 else 2 ** (k - 1), "to": 0 if k == 0 else 2**k - 1,
                  "documents": int(n)} for k, n in enumerate(buckets.tolist()) if n]
    ranked = frequencies.copy()
    ranked[list(skip)] = -1
    total = int(ranked.clip(min=0).sum())
    top = [{"id": int(i), "token": tokenizer.id_to_token(int(i)), "count": int(ranked[i]),
            "share": ranked[i] / total if total else 0.0}
           for i in np.argsort(-ranked, kind="stable")[:TOP_TOKENS] if ranked[i] > 0]
    return {"tokens_per_document": histogram, "top_tokens": top}


def format_report(meta: dict) -> str:
    """stats.txt: what went in, what each step removed, and what came out."""
    reading, cleaning, splits = meta["reading"], meta["cleaning"], meta["splits"]
    lines = ["lmlab prepared dataset", "",
             f"read     {reading['files']} files, {reading['documents']:,} documents"
             f" ({reading['invalid_utf8_documents']:,} with invalid UTF-8:"
             f" {reading['invalid_utf8_bytes']:,} bytes replaced)"]
    for reason, count in sorted(reading["skipped"].items()):
        lines.append(f"skipped  {count:,} records: {reason.replace('_', ' ')}")
    recipe = meta["recipe"]
    off = {"exact_dedup": not recipe["exact_dedup"], "quality": not recipe["quality_filter"],
           "near_dedup": recipe["near_dedup_threshold"] is None}
    lines += ["", "step          documents in → out"]
    for row in cleaning["steps"]:
        lines.append(f"{row['step']:<13} {row['in']:>12,} → {row['out']:,}"
                     + ("  (off)" if off.get(row["step"]) else ""))
    for name, count in sorted(cleaning["quality_rejected"].items()):
        lines.append(f"  quality: {name:<26} {count:,}")
    lines.append(f"(normalisation changed {cleaning['normalised_changed']:,}, control characters "
                 f"stripped from {cleaning['control_stripped']:,})")
    if meta["mix"]:
        lines += ["", "source                          asked   realised   documents in → out"]
        for row in meta["mix"]:
            lines.append(f"{row['source'][-30:]:<30} {row['requested_share']:>6.1%} "
                         f"{row['realised_share']:>10.1%} {row['documents_in']:>12,} → "
                         f"{row['documents_out']:,}")
    lines += ["", "split         documents       tokens    sentences        bytes"]
    for name, split in splits.items():
        lines.append(f"{name:<12} {split['documents']:>10,} {split['tokens']:>12,} "
                     f"{split['sentences']:>12,} {split['bytes']:>12,}")
    lines += ["", "tokens per document (without [EOS])"]
    for row in meta["stats"]["tokens_per_document"]:
        lines.append(f"{row['from']:>8,} – {row['to']:<10,} {row['documents']:>10,}")
    lines += ["", f"most frequent tokens (vocabulary {meta['vocab_size']:,})"]
    for row in meta["stats"]["top_tokens"]:
        lines.append(f"{row['id']:>7} {row['token']!r:<16} {row['count']:>12,} "
                     f"{row['share']:>7.2%}")
    return "\n".join(lines) + "\n"
