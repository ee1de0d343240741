"""`lmlab.evaluate`: perplexity, bits per byte and minimal-pair accuracy of a run, as one
JSON-ready dict, under every scoring rule the run's objectives call for (see rules.py);
`score_texts`, the per-text log-likelihoods behind `Run.score`; and `score_continuations`,
continuations' log-likelihoods given their contexts, as evaluation harnesses ask for them."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from lmlab.eval.minimal_pairs import minimal_pair_accuracy, minimal_pair_files, read_minimal_pairs
from lmlab.eval.perplexity import text_metrics
from lmlab.eval.rules import NextTokenScoring, ScoringRule, rules_for
from lmlab.eval.scoring import DocumentScores, score_chunks, score_documents
from lmlab.eval.texts import EvalText, dataset_text, file_text
from lmlab.eval.windows import DEFAULT_BATCH_TOKENS
from lmlab.runs import Run, load_run
from lmlab.runs.reading import Text, as_batch, encode


def scoring_rule(run: Run, name: str | None = None) -> ScoringRule:
    """The rule called `name`, or the one of the run's first objective."""
    rules = rules_for(run.objective, run.special)
    if name is None:
        return rules[0]
    for rule in rules:
        if rule.name == name:
            return rule
    raise ValueError(f"a model trained with {run.spec!r} has no {name!r} scoring; "
                     f"choose {', '.join(r.name for r in rules)}")


def score_texts(run: Run, texts: Sequence[Text], rule: str | None = None,
                stride: int | None = None, batch_tokens: int = DEFAULT_BATCH_TOKENS,
                progress: bool = False) -> DocumentScores:
    """Each text's log-likelihood in nats under `rule` (default: the run's first objective's):
    summed log-probabilities for causal and prefix models, pseudo-log-likelihood for masked
    and span models. Texts are strings or, for runs without a tokenizer, token-id lists. The
    result names the rule and counts the tokens scored per text."""
    items, _ = as_batch(texts)  # one text (a string or an id list) or several
    documents = [np.asarray(encode(run, text), dtype=np.int64) for text in items]
    return score_documents(run.model, scoring_rule(run, rule), documents, stride,
                           batch_tokens, progress)


def next_token_rule(run: Run) -> NextTokenScoring:
    """The run's next-token scoring (causal, else prefix LM), refused in one line for a run
    that never learned to predict the next token."""
    for rule in rules_for(run.objective, run.special):
        if isinstance(rule, NextTokenScoring):
            return rule
    raise ValueError(f"a model trained with {run.spec!r} never learned to predict the next "
                     "token, so it cannot score continuations; use a run trained with clm or "
                     "prefix, or a mix with one of them")


def score_continuations(run: Run, requests: Sequence[tuple[Sequence[int], Sequence[int]]],
                        batch_tokens: int = DEFAULT_BATCH_TOKENS,
                        progress: bool = False) -> DocumentScores:
    """log p(continuation | context) in nats for each (context ids, continuation ids) pair,
    each read in one row of at most the model's context, its context's start dropped first;
    a continuation was the greedy one where `top1` equals `predictions`."""
    rule = next_token_rule(run)
    rows = [(torch.as_tensor(c, dtype=torch.long), torch.as_tensor(t, dtype=torch.long))
            for c, t in requests]
    window = rule.window(run.max_seq_len)
    order = sorted(range(len(rows)), key=lambda i: -len(rows[i][0]) - len(rows[i][1]))
    chunks = [(i, rule.continuation(*rows[i], window)) for i in order]  # checked before scoring
    total = sum(len(t) for _, t in rows)
    return score_chunks(run.model, rule, chunks, len(rows), total, batch_tokens, progress)


def evaluation_text(data: str | Path | Sequence[str | Path], run: Run,
                    split: str = "validation", text_field: str = "text",
                    max_tokens: int | None = None) -> EvalText:
    """A prepared dataset directory (its `split`), or text files, directories and globs."""
    sources = [data] if isinstance(data, str | Path) else list(data)
    first = Path(sources[0])
    if len(sources) == 1 and first.is_dir() and any(
            (first / name).exists() for name in ("meta.json", "tokenizer.json")):
        return dataset_text(first, split, run, max_tokens)
    return file_text([str(s) for s in sources], run, text_field, max_tokens)


def evaluate(model: str | Path | Run, data: str | Path | Sequence[str | Path] | None = None,
             pairs: Sequence[str | Path] | str | Path | None = None, *, stride: int | None = None,
             split: str = "validation", max_tokens: int | None = None, text_field: str = "text",
             group_by: Sequence[str] | None = None, checkpoint: str = "best",
             device: str | torch.device = "cpu", batch_tokens: int = DEFAULT_BATCH_TOKENS,
             progress: bool = False) -> dict:
    """Evaluate a run directory (or a loaded `Run`) on text and/or minimal pairs.

    `data`: a prepared dataset (its validation split unless `split` says otherwise) or text
    files; `pairs`: BLiMP-format .jsonl files or directories of them. Returns
    {"run", "checkpoint", "objective", "data", "perplexity": [one entry per rule],
    "pairs", "minimal_pairs": [one entry per rule]}, the parts asked for.
    """
    if data is None and pairs is None:
        raise ValueError("nothing to evaluate: give data (a prepared dataset or text files) "
                         "and/or minimal pairs")
    if batch_tokens < 1:
        raise ValueError(f"batch_tokens must be at least 1, got {batch_tokens}")
    run = model if isinstance(model, Run) else load_run(model, checkpoint, device)
    minimal_pair_paths = [pairs] if isinstance(pairs, str | Path) else pairs
    minimal_pairs = (None if minimal_pair_paths is None
                     else read_minimal_pairs(minimal_pair_paths, group_by))
    rules = rules_for(run.objective, run.special)
    result = {"run": str(run.path), "objective": run.spec,
              "checkpoint": run.checkpoint.name if run.checkpoint else None}
    if data is not None:
        text = evaluation_text(data, run, split, text_field, max_tokens)
        result["data"] = {"source": text.source, "documents": len(text.documents),
                          "tokens": text.tokens, "bytes": text.bytes,
                          "invalid_utf8_bytes": text.invalid_utf8_bytes}
        result["perplexity"] = [text_metrics(run.model, rule, text, stride, batch_tokens,
                                             progress) for rule in rules]
    if minimal_pairs is not None:
        result["pairs"] = {"files": [str(p) for p in minimal_pair_files(minimal_pair_paths)],
                           "pairs": len(minimal_pairs)}
        result["minimal_pairs"] = [_minimal_pair_results(run, rule, minimal_pairs,
                                                         batch_tokens, progress)
                                   for rule in rules]
    return result


def _minimal_pair_results(run: Run, rule: ScoringRule, minimal_pairs, batch_tokens: int,
                          progress: bool) -> dict:
    timing = {}

    def score(sentences: list[str]):
        start = time.perf_counter()
        scores = score_texts(run, sentences, rule.name, batch_tokens=batch_tokens,
                             progress=progress)
        timing.update(sentences=len(sentences), tokens_scored=int(scores.predictions.sum()),
                      seconds=time.perf_counter() - start)
        return scores.log_likelihood

    accuracy = minimal_pair_accuracy(minimal_pairs, score)
    return {"rule": rule.name, "description": rule.description, **timing,
            "tokens_per_second": timing["tokens_scored"] / max(timing["seconds"], 1e-9),
            **accuracy}
