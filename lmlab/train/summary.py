"""The lines a pre-training run ends with: what the model learned, shown on a sentence and
measured against a model that knows only how often each token occurs, and what to run next."""

from __future__ import annotations

import math
import os
import shlex
from pathlib import Path

import numpy as np

from lmlab.data.dataset import Dataset
from lmlab.report.plots import loss_name
from lmlab.train.config import TrainConfig
from lmlab.train.metrics import read_metrics

# The built-in corpus is the Python standard library's documentation.
MASKED_EXAMPLE = "Return a new [MASK] containing the items of the list."
CAUSAL_EXAMPLE = "Return a new list containing"
CONTINUATION_TOKENS = 12


def unigram_loss(dataset: Dataset) -> float:
    """Cross-entropy in nats of the validation split's ordinary tokens under the training
    split's token frequencies (add-one smoothed): the loss of a model that has learned the
    frequencies and nothing of context."""
    special = np.asarray(dataset.special.all_ids)
    train = dataset.train.read(0, dataset.train.num_tokens)
    counts = np.bincount(train, minlength=dataset.special.vocab_size).astype(np.float64) + 1
    counts[special] = 0
    validation = dataset.validation.read(0, dataset.validation.num_tokens)
    validation = validation[~np.isin(validation, special)]
    return float(-np.log(counts[validation] / counts.sum()).mean())


def _loss_lines(out: Path, dataset: Dataset) -> list[str]:
    evals = [r for r in read_metrics(out) if r.get("kind") == "eval"]
    losses = {key: value for key, value in (evals[-1] if evals else {}).items()
              if key.endswith("_loss") and not key.endswith("nsp_loss")}
    if not losses:
        return []
    baseline = unigram_loss(dataset)
    lines = [f"  {loss_name(key)}: {value:.2f} nats (perplexity {math.exp(min(value, 50)):,.0f})"
             for key, value in losses.items()]
    verdict = ("below it: the model uses the context" if min(losses.values()) < baseline else
               "not below it yet: the model has learned little beyond which tokens are common")
    return [*lines, f"  a model of token frequencies alone: {baseline:.2f} nats (perplexity "
                    f"{math.exp(min(baseline, 50)):,.0f}); {verdict}"]


def _example(out: Path) -> tuple[list[str], str]:
    """Fill-mask on a sentence for a masked model, else a greedy continuation of a prompt;
    and the command to try the model on one's own text."""
    from lmlab.infer.fill_mask import fill_mask
    from lmlab.infer.generate import generate
    from lmlab.infer.threads import threads_for
    from lmlab.runs import load_run

    run_arg = shlex.quote(str(out))
    with threads_for(1):
        run = load_run(out)
        if run.tokenizer is None:
            return [], f"lmlab eval {run_arg} --data DATASET"
        if run.objective.traits.fill_mask is not None:
            (candidates,) = fill_mask(run, [MASKED_EXAMPLE], top_k=5)[0]
            ranked = "  ".join(f"{c.token.strip() or repr(c.token)} ({c.probability:.2f})"
                               for c in candidates)
            return ([f"  fill-mask {MASKED_EXAMPLE!r}: {ranked}"],
                    f"lmlab fill-mask {run_arg} \"Your sentence with a [MASK].\"")
        result = generate(run, CAUSAL_EXAMPLE, CONTINUATION_TOKENS, greedy=True)
        return ([f"  continuation of {CAUSAL_EXAMPLE!r}: {result.text!r}"],
                f"lmlab generate {run_arg} \"Your prompt\"")


def print_summary(out: Path, dataset: Dataset, cfg: TrainConfig) -> None:
    """What `lmlab pretrain` prints last: once, by rank 0 under torchrun."""
    if os.environ.get("RANK", "0") == "0":
        print(summary(out, dataset, cfg))


def summary(out: Path, dataset: Dataset, cfg: TrainConfig) -> str:
    example, try_it = _example(out)
    run_arg = shlex.quote(str(out))
    data = f" --data {shlex.quote(cfg.data)}" if cfg.data else ""
    return "\n".join([
        f"run saved in {out}; at its end, on held-out text:", *_loss_lines(out, dataset),
        *example, f"curves: {out / 'curves.png'}",
        "next:", f"  {try_it}", f"  lmlab eval {run_arg} --data DATASET_OR_TEXT_FILES",
        f"  lmlab pretrain --objective {shlex.quote(cfg.objective)}{data} --out {run_arg} "
        "--minutes 30 --overwrite   (longer runs learn more)"])
