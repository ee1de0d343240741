"""The lines a pre-training run ends with: what the model learned, measured against a model
that knows only how often each token occurs and shown on the run's own held-out text, and what
to run next. A report, not part of training: nothing in it can turn a finished run into a
failed one."""

from __future__ import annotations

import math
import os
import shlex
import sys
from pathlib import Path

import numpy as np

from lmlab.config.options import options_of
from lmlab.config.training import TrainConfig
from lmlab.data.dataset import Dataset
from lmlab.infer.fill_mask import fill_mask
from lmlab.infer.generate import generate
from lmlab.kernels.machine import threads_for
from lmlab.runs import Run, load_run
from lmlab.runs.layout import CONFIG
from lmlab.runs.metrics import GENERAL_TEXT, loss_name, read_metrics
from lmlab.runs.reading import MASK_TEXT
from lmlab.runs.schema import read_run_config

PASSAGE_TOKENS = 24  # of held-out text shown to a masked model, at most
PROMPT_TOKENS = 8  # of held-out text a generating model continues, at most
CONTINUATION_TOKENS = 12
# Settings a suggested longer run does not repeat: its place, its budget, how it starts.
NOT_REPEATED = ("out", "overwrite", "resume", "steps", "tokens", "minutes")
SEARCHED_TOKENS = 4096  # of the validation split, for a passage long enough to show


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
    last = evals[-1] if evals else {}
    # Token predictions only, those validation gives a perplexity: a sentence label's or a
    # discriminator's loss is no cross-entropy over the vocabulary to set beside frequencies.
    losses = {key: value for key, value in last.items()
              if key.endswith("_loss") and f"{key.removesuffix('_loss')}_ppl" in last}
    if not losses:
        return []
    baseline = unigram_loss(dataset)
    lines = [f"  {loss_name(key)}: {value:.2f} nats ({_perplexity(value)})"
             for key, value in losses.items()]
    verdict = ("below it: the model uses the context" if min(losses.values()) < baseline else
               "not below it yet: the model has learned little beyond which tokens are common")
    return [*lines, f"  a model of token frequencies alone: {baseline:.2f} nats "
                    f"({_perplexity(baseline)}); {verdict}"]


def _perplexity(loss: float) -> str:
    """exp(loss), or that it passes what a vocabulary could mean (e^50, past any tokenizer's
    size: a diverged run), rather than one capped number for every such loss."""
    return f"perplexity {math.exp(loss):,.0f}" if loss <= 50 else "perplexity beyond e^50"


def _start_and_end(evals: list[dict]) -> tuple[dict, dict, int] | None:
    """A continued run's first and last validation (the first after its head warm-up, when it
    had one: its new heads were untrained at step 0), and the warm-up's steps; None for a run
    from random weights, or one cut off before it measured both."""
    if not evals or evals[0]["step"] != 0 or "head_warmup_steps" not in evals[0]:
        return None
    warmup = int(evals[0]["head_warmup_steps"])
    start = next((r for r in evals if r["step"] == warmup), None)
    if start is None or evals[-1]["step"] <= warmup:
        return None
    return start, evals[-1], warmup


def _ended_in_head_warmup(evals: list[dict]) -> bool:
    """Whether a continued run with a head warm-up stopped before the warm-up ended (a time
    budget re-planned it shorter, or a stop cut it off)."""
    warmup = int(evals[0].get("head_warmup_steps", 0)) if evals and evals[0]["step"] == 0 else 0
    return warmup > 0 and evals[-1]["step"] <= warmup


def _before_after_lines(out: Path) -> list[str]:
    """For a continued run: each token loss from its start to its end, on its own text and on
    general text (what it forgot), and a warning when it ended worse on its own text."""
    evals = [r for r in read_metrics(out) if r.get("kind") == "eval"]
    if _ended_in_head_warmup(evals):
        return [f"the run ended at step {evals[-1]['step']}, within its "
                f"{evals[0]['head_warmup_steps']}-step head warm-up: only its new heads "
                "trained, the rest of the model is as it came; give it a longer budget "
                "(--resume with more --steps or --minutes) to adapt the model itself"]
    found = _start_and_end(evals)
    if found is None:
        return []
    start, end, warmup = found
    keys = [key for key in start if key.endswith("_loss") and key in end
            and f"{key.removesuffix('_loss')}_ppl" in start]
    when = f"after the new heads' {warmup}-step warm-up" if warmup else "the weights as they came"
    lines = [f"from its start ({when}, step {start['step']}) to its end (step {end['step']}):"]
    lines += [f"  {loss_name(key)}: {start[key]:.2f} → {end[key]:.2f} nats" for key in keys]
    worse = [key for key in keys if end[key] > start[key]]
    own = [key for key in worse if not key.startswith(GENERAL_TEXT)]
    if own:
        lines.append(f"warning: the model ended worse on its own text than it began "
                     f"({_changes(start, end, own)}); the starting weights may serve better: "
                     "try a lower --lr or a longer --head-warmup-steps")
    if len(worse) > len(own):
        lines.append(f"warning: the model ended worse on general text than it began "
                     f"({_changes(start, end, [k for k in worse if k not in own])}): it forgot "
                     "some of what it knew, which can cost the tasks it is wanted for; try a "
                     "lower --lr, and compare with the model as it came (lmlab compare --init "
                     "RUN --objectives none,...)")
    return lines


def _changes(start: dict, end: dict, keys: list[str]) -> str:
    return "; ".join(f"{start[key]:.2f} → {end[key]:.2f} nats" for key in keys)


def held_out_passage(dataset: Dataset, length: int) -> list[int]:
    """Up to `length` ordinary tokens of the first held-out document long enough to show
    (else the longest one seen): the run's own kind of text, never seen in training."""
    tokens = dataset.validation.read(0, min(SEARCHED_TOKENS, dataset.validation.num_tokens))
    pieces = np.split(tokens, np.flatnonzero(np.isin(tokens, dataset.special.all_ids)))
    pieces = [piece[np.isin(piece, dataset.special.all_ids, invert=True)] for piece in pieces]
    passage = next((p for p in pieces if len(p) >= length), max(pieces, key=len, default=[]))
    return [int(token) for token in passage[:length]]


def masked_position(ids: list[int], dataset: Dataset) -> int:
    """The token nearest the passage's middle that is a whole word (it starts a word, and so
    does the token after it), so the example asks for a word, not a piece of one."""
    def starts_word(i: int) -> bool:
        return i >= len(ids) or dataset.word_starts is None or bool(dataset.word_starts[ids[i]])

    words = [i for i in range(1, len(ids)) if starts_word(i) and starts_word(i + 1)]
    return min(words or [len(ids) // 2], key=lambda i: abs(i - len(ids) // 2))


def _shown(run: Run, ids: list[int]) -> str:
    if run.tokenizer is None:
        return " ".join(map(str, ids))
    return run.tokenizer.decode(ids, skip_special_tokens=False)


def _one_line(text: str) -> str:
    """A passage as one line of the terminal: its line breaks and runs of spaces as one."""
    return " ".join(text.split())


def _with_mask(run: Run, ids: list[int], where: int) -> str:
    """The passage with its token at `where` shown as [MASK], keeping the space that
    byte-level BPE carries inside the hidden token (" the"), which a decoded mask loses."""
    if run.tokenizer is None:
        return _shown(run, [*ids[:where], run.special.mask, *ids[where + 1:]])
    before, hidden = _shown(run, ids[:where]), _shown(run, [ids[where]])
    space = " " if hidden[:1].isspace() or not before.endswith(" ") else ""
    after = _shown(run, ids[where + 1:])
    return f"{before}{space}{MASK_TEXT}{'' if after[:1].isspace() else ' '}{after}"


def _fill_mask_lines(run: Run, dataset: Dataset) -> list[str]:
    # room for the framing tokens ([CLS] … [SEP], or … [EOS]) inside the context
    ids = held_out_passage(dataset, min(PASSAGE_TOKENS, run.max_seq_len - 2))
    if len(ids) < 2:
        return ["  (no held-out passage long enough to show fill-mask on)"]
    where = masked_position(ids, dataset)
    (candidates,) = fill_mask(run, [[*ids[:where], run.special.mask, *ids[where + 1:]]],
                              top_k=5)[0]
    ranked = "  ".join(f"{c.token.strip() or repr(c.token)} ({c.probability:.2f})"
                       for c in candidates)
    return [f"  fill-mask on held-out text {_one_line(_with_mask(run, ids, where))!r}",
            f"    hidden: {_shown(run, [ids[where]]).strip()!r}; the model's guesses: {ranked}"]


def _continuation_lines(run: Run, dataset: Dataset) -> list[str]:
    # at most half the context, leaving the rest to continue in; less three tokens, which
    # span corruption's prompt adds (a gap's sentinel, [EOS], a sentinel)
    prompt = held_out_passage(dataset, min(PROMPT_TOKENS, run.max_seq_len // 2 - 3))
    if not prompt:
        return ["  (no held-out passage long enough to continue)"]
    new_tokens = max(1, min(CONTINUATION_TOKENS, run.max_seq_len - len(prompt) - 3))
    result = generate(run, prompt, new_tokens, greedy=True)
    # infilling fills the gap left at the prompt's end: that fill is the continuation
    continuation = result.fills[-1] if result.fills else str(result)
    return [f"  continuation of held-out {_one_line(_shown(run, prompt))!r}: {continuation!r}"]


def _example(out: Path, dataset: Dataset) -> tuple[list[str], str]:
    """Fill-mask for a model that can, else a greedy continuation for one that generates;
    and the command to try the model on one's own text."""
    run_arg = shlex.quote(str(out))
    with threads_for(1):
        run = load_run(out, special=dataset.special)  # ids-only runs: the data's specials
        objective = run.objective
        if objective.fill_mask_head is not None and objective.fill_mask_head[0] in run.model.heads:
            return (_fill_mask_lines(run, dataset),
                    f"lmlab fill-mask {run_arg} \"Your sentence with a [MASK].\"")
        if objective.can_generate:
            return _continuation_lines(run, dataset), f"lmlab generate {run_arg} \"Your prompt\""
        return [], f"lmlab embed {run_arg} \"Your sentence.\""


def _example_or_why_not(out: Path, dataset: Dataset) -> tuple[list[str], list[str]]:
    """The example's lines and the command to try the model with (none when the run could
    not be read for it)."""
    try:
        example, try_it = _example(out, dataset)
        return example, [f"  {try_it}"]
    except Exception as error:  # a report: whatever it hits, the run it reports on succeeded
        return [f"  (the example could not be shown: {_first_line(error)})"], []


def _first_line(error: Exception) -> str:
    return str(error).splitlines()[0] if str(error) else type(error).__name__


def _lineage_lines(out: Path) -> list[str]:
    """Where a continued pre-training started: the source as a path from here, its checkpoint
    and the start of its weights' SHA-256."""
    try:
        init = read_run_config(out / CONFIG).init
    except Exception as error:  # a report never fails the run
        return [f"(the run's source could not be read: {_first_line(error)})"]
    if init is None:
        return []
    source = os.path.normpath(out / init.run)  # as the run's own path was given
    return [f"continued from {source} ({init.checkpoint}, weights SHA-256 "
            f"{init.weights_sha256[:12]}…)"]


def print_summary(out: Path, dataset: Dataset, cfg: TrainConfig) -> None:
    """What `lmlab pretrain` prints last: once, by rank 0 under torchrun."""
    if os.environ.get("RANK", "0") == "0":
        print(summary(out, dataset, cfg))
        sys.stdout.flush()


def summary(out: Path, dataset: Dataset, cfg: TrainConfig) -> str:
    example, try_it = _example_or_why_not(out, dataset)
    try:
        losses, changes = _loss_lines(out, dataset), _before_after_lines(out)
    except Exception as error:  # as above: a report never fails the run
        losses, changes = [f"  (the held-out losses could not be read: {_first_line(error)})"], []
    run_arg = shlex.quote(str(out))
    # a run that made its model worse is not one to lengthen
    worse = any(line.startswith("warning: the model ended worse") for line in changes)
    again = shlex.join(["lmlab", "pretrain", "--objective", cfg.objective,
                        *options_of(cfg, leave_out=("objective", *NOT_REPEATED)),
                        "--out", str(out), "--minutes", "30", "--overwrite"])
    return "\n".join([
        *_lineage_lines(out), f"run saved in {out}; at its end, on held-out text:", *losses,
        *example, *changes, f"curves: {out / 'curves.png'}",
        "next:", *try_it, f"  lmlab eval {run_arg} --data DATASET_OR_TEXT_FILES",
        *([] if worse else [f"  {again}   (longer runs learn more)"])])
