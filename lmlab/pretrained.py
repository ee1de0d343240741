"""`lmlab.load(RUN)`: a loaded run with the verbs of inference and evaluation as methods.

A thin facade: each method hands the run to the function that does the work (lmlab/infer/,
lmlab/eval/), which take any `Run` as well.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from lmlab.data.special_tokens import SpecialTokens
from lmlab.eval.evaluate import score_texts
from lmlab.infer.embed import embed
from lmlab.infer.fill_mask import fill_mask
from lmlab.infer.generate import generate, stream
from lmlab.runs import Run, load_run


@dataclass
class Pretrained(Run):
    """A trained model ready for use, in eval mode. Texts may be strings or, for runs without
    a tokenizer, lists of token ids."""

    def fill_mask(self, texts, top_k: int = 5, batch_size: int = 32):
        """Top-k candidates with probabilities for each [MASK] (see infer/fill_mask.py)."""
        return fill_mask(self, texts, top_k, batch_size)

    def generate(self, prompts, max_new_tokens: int = 50, **options):
        """Continue or infill prompts (see infer/generate.py for the options)."""
        return generate(self, prompts, max_new_tokens, **options)

    def stream(self, prompt, max_new_tokens: int = 50, **options):
        """Like `generate` for one prompt, yielding text pieces as they are produced."""
        return stream(self, prompt, max_new_tokens, **options)

    def embed(self, texts, pooling: str | None = None, normalize: bool | None = None,
              batch_size: int = 32):
        """One vector per text, mean or [CLS] pooled; by default as the run records (an
        imported sentence-transformers model's own pooling), else mean (see infer/embed.py)."""
        return embed(self, texts, pooling, normalize, batch_size)

    def score(self, texts, rule: str | None = None, **options):
        """Each text's log-likelihood in nats, as `DocumentScores` naming the rule: summed
        log-probabilities for causal and prefix models, pseudo-log-likelihood for masked and
        span models (see lmlab/eval/rules.py; options as for lmlab.eval.evaluate.score_texts)."""
        return score_texts(self, texts, rule, **options)


def load(run: str | Path, checkpoint: str = "best", device: str | torch.device = "cpu",
         special: SpecialTokens | None = None) -> Pretrained:
    """Load a run directory written by `lmlab pretrain` (see lmlab.runs.load_run)."""
    return Pretrained(**vars(load_run(run, checkpoint, device, special)))
