"""Extractive question answering: windows over long contexts, answer labels, and turning a
model's start/end logits back into a span of the context.

A window reads `[CLS] question [SEP] context-part [SEP]`. The question is never truncated; the
context is cut into overlapping parts, so that an answer cut by one window's edge can lie whole
in a neighbour. Position 0 ([CLS]) stands for "no answer": as in BERT on SQuAD 2.0 (Devlin et
al., 2019, section 4.3) the null score is the [CLS] start + end logit, and a span is answered
only when it beats that score by a threshold.

Post-processing follows Hugging Face's `examples/pytorch/question-answering/utils_qa.py`
(`postprocess_qa_predictions`, whose defaults n_best 20 and max answer 30 tokens are kept here):
each window proposes its top starts x top ends; an example's null score is its lowest over
windows (every window must agree there is no answer); an answer's score is a softmax over the
n-best candidates. Two deliberate differences: a span proposed by several overlapping windows
counts once, at its best score, so the overlap does not split its probability; and the text is
stripped of surrounding whitespace, which byte-level BPE offsets include (" fox").

The module is pure: callers tokenize and pass ids and character offsets, as
`tokenizers.Tokenizer.encode(text, add_special_tokens=False)` gives them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

import numpy as np

Offset = tuple[int, int]
ScoredSpan = tuple[float, int, int, str]  # score, character start, character end, text


@dataclass
class QAWindow:
    example: int  # the example (question) this window belongs to
    input_ids: list[int]
    token_type_ids: list[int]
    offsets: list[Offset | None]  # character span in the context; None outside the context part
    start: int = 0  # labelled answer tokens; 0, 0 = no answer in this window ([CLS])
    end: int = 0


class QuestionTooLong(ValueError):
    """The question leaves no room for context; cutting it instead would change the task."""


@dataclass(frozen=True)
class Answer:
    text: str
    score: float  # probability among the n-best candidates
    start: int  # context[start:end] == text; 0, 0 for no answer
    end: int


DEFAULT_STRIDE = 128  # BERT's SQuAD fine-tuning, with 384-token windows


def context_spans(length: int, room: int, stride: int) -> list[tuple[int, int]]:
    """The context token ranges [a, b) the windows hold.

    Windows step by room - stride, so neighbours share `stride` tokens (HF's doc_stride). HF's
    tokenizer overflow leaves the last window short; here it is moved back to end at the
    context's end instead, so every window is full and its tokens see as much context as fits.
    """
    last = max(length - room, 0)
    return [(a, min(a + room, length)) for a in [*range(0, last, room - stride), last]]


def make_windows(example: int, question_ids: list[int], context_ids: list[int],
                 context_offsets: list[Offset], cls_id: int | None, sep_id: int | None,
                 max_len: int, stride: int | None = None) -> list[QAWindow]:
    """`[CLS] question [SEP] context-part [SEP]` windows of at most max_len tokens covering the
    whole context (one window without context tokens when it is empty). A None id is left
    out (as Encoder frames rows for a tokenizer without it); position 0 still stands for "no
    answer", so without [CLS] the question's first token does. Neighbouring windows share
    `stride` tokens; None shares 128, or half a window's context when that is smaller."""
    if len(context_ids) != len(context_offsets):
        raise ValueError(f"{len(context_ids)} context ids but {len(context_offsets)} offsets")
    leader = [] if cls_id is None else [cls_id]
    ender = [] if sep_id is None else [sep_id]
    head = [*leader, *question_ids, *ender]
    if not head:
        raise ValueError("an empty question without [CLS] or [SEP] leaves no position to "
                         "stand for 'no answer'")
    room = max_len - len(head) - len(ender)
    if room < 1:
        raise QuestionTooLong(f"a question of {len(question_ids)} tokens leaves no room for "
                              f"context in windows of max_len {max_len}")
    if stride is None:
        stride = min(DEFAULT_STRIDE, room // 2)
    if not 0 <= stride < room:
        raise ValueError(f"doc_stride must be at least 0 and below the {room} context tokens a "
                         f"window holds, got {stride}")
    return [QAWindow(example, head + context_ids[a:b] + ender,
                     [0] * len(head) + [1] * (b - a + len(ender)),
                     [None] * len(head) + [tuple(o) for o in context_offsets[a:b]]
                     + [None] * len(ender))
            for a, b in context_spans(len(context_ids), room, stride)]


def label_window(window: QAWindow, answer_start: int, answer_end: int) -> QAWindow:
    """The window labelled with the tokens covering the answer's characters [start, end), or
    with the null position when the window holds only part of the answer or none of it."""
    context = [(i, o) for i, o in enumerate(window.offsets) if o is not None]
    start = end = 0
    if context and context[0][1][0] <= answer_start < answer_end <= context[-1][1][1]:
        # The first token ending after the answer's first character and the last token starting
        # before its end: the tokens holding its first and last characters, even when offsets
        # include a leading space or skip one.
        start = next(i for i, (_, stop) in context if stop > answer_start)
        end = next(i for i, (begin, _) in reversed(context) if begin < answer_end)
    if start > end:  # the answer's characters fall between tokens (whitespace only)
        start = end = 0
    return replace(window, start=start, end=end)


def best_answer(windows: Sequence[QAWindow], start_logits: Sequence[np.ndarray],
                end_logits: Sequence[np.ndarray], context: str, n_best: int = 20,
                max_answer_len: int = 30, null_threshold: float | None = None) -> Answer:
    """The answer to one example from all its windows' logits.

    null_threshold None is SQuAD v1.1: some span is always answered ("" only when no span is
    valid). With a threshold (SQuAD v2.0) the answer is "" when the null score exceeds the best
    span's score by more than the threshold.
    """
    if not len(windows) == len(start_logits) == len(end_logits):
        raise ValueError(f"{len(windows)} windows but {len(start_logits)} start and "
                         f"{len(end_logits)} end logit arrays")
    if n_best < 1 or max_answer_len < 1:
        raise ValueError(f"n_best and max_answer_len must be positive, got {n_best}, "
                         f"{max_answer_len}")
    spans: dict[Offset, ScoredSpan] = {}
    null_score = np.inf
    for window, starts, ends in zip(windows, start_logits, end_logits, strict=True):
        starts, ends = _window_logits(starts, window), _window_logits(ends, window)
        null_score = min(null_score, float(starts[0] + ends[0]))
        for candidate in _candidates(window, starts, ends, context, n_best, max_answer_len):
            kept = spans.get(candidate[1:3])
            if kept is None or candidate[0] > kept[0]:
                spans[candidate[1:3]] = candidate
    ranked = sorted(spans.values(), key=_score, reverse=True)
    if null_threshold is None:
        return _scored(ranked[0], ranked, n_best) if ranked else Answer("", 0.0, 0, 0)
    null = (null_score, 0, 0, "")
    unanswered = not ranked or null_score - ranked[0][0] > null_threshold
    return _scored(null if unanswered else ranked[0], [*ranked, null], n_best, null)


def _window_logits(logits: np.ndarray, window: QAWindow) -> np.ndarray:
    """One window's logits, without the padding a batch may add past its tokens."""
    logits = np.asarray(logits, dtype=np.float64)
    if logits.shape[0] < len(window.input_ids):
        raise ValueError(f"{logits.shape[0]} logits for a window of {len(window.input_ids)} "
                         f"tokens")
    return logits[:len(window.input_ids)]


def _candidates(window: QAWindow, starts: np.ndarray, ends: np.ndarray, context: str,
                n_best: int, max_answer_len: int) -> Iterator[ScoredSpan]:
    """The window's top starts x top ends that are both context tokens, in order, and short
    enough; spans of whitespace only are no answer and are skipped."""
    offsets = window.offsets
    for s in np.argsort(-starts, kind="stable")[:n_best].tolist():
        for e in np.argsort(-ends, kind="stable")[:n_best].tolist():
            if offsets[s] is None or offsets[e] is None or not 0 <= e - s < max_answer_len:
                continue
            a, b = _stripped(context, offsets[s][0], offsets[e][1])
            if a < b:
                yield float(starts[s] + ends[e]), a, b, context[a:b]


def _stripped(context: str, a: int, b: int) -> Offset:
    """The span [a, b) less the whitespace around it."""
    span = context[a:b]
    return a + len(span) - len(span.lstrip()), b - len(span) + len(span.rstrip())


def _score(candidate: ScoredSpan) -> float:
    return candidate[0]


def _scored(chosen: ScoredSpan, candidates: list[ScoredSpan], n_best: int,
            null: ScoredSpan | None = None) -> Answer:
    """The chosen candidate with its softmax probability over the n_best best candidates, to
    which the chosen one and the null answer are added back if they rank lower, as utils_qa
    adds back the null answer."""
    kept = sorted(candidates, key=_score, reverse=True)[:n_best]
    kept += list({chosen, null} - set(kept) - {None})
    scores = np.array([_score(c) for c in kept])
    probabilities = np.exp(scores - scores.max())
    probability = probabilities[kept.index(chosen)] / probabilities.sum()
    return Answer(chosen[3], float(probability), chosen[1], chosen[2])
