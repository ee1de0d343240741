"""Which tokens of a long document each forward pass reads, and which of them it scores.

A document longer than the model's context is read in windows of `window` tokens, moving by
`stride`; every token is scored in exactly one window.

    left context  (next-token scoring; the "perplexity of fixed-length models" scheme): the
                  first window scores all its tokens, each later one only its last `stride`
                  tokens, which thereby see at least window - stride tokens to their left.
    centred       (masked scoring): each window scores `stride` tokens in its middle, so a
                  token sees about (window - stride) / 2 tokens on either side; windows at
                  the document's ends shift inwards.

With stride = window both cut the document into independent, non-overlapping chunks.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_BATCH_TOKENS = 16384  # padded tokens a forward pass reads, over all its windows


@dataclass(frozen=True)
class Window:
    start: int  # the window reads tokens [start, stop)
    stop: int
    score_start: int  # and scores tokens [score_start, score_stop)
    score_stop: int


def check_stride(window: int, stride: int) -> None:
    if window < 1:
        raise ValueError(f"the scoring window must hold at least one token, got {window}")
    if not 1 <= stride <= window:
        raise ValueError(f"stride must be between 1 and the window of {window} tokens, "
                         f"got {stride}")


def left_context_windows(length: int, window: int, stride: int) -> list[Window]:
    check_stride(window, stride)
    windows, scored = [], 0
    for start in range(0, length, stride):
        stop = min(start + window, length)
        windows.append(Window(start, stop, scored, stop))
        scored = stop
        if stop == length:
            break
    return windows


def centred_windows(length: int, window: int, stride: int) -> list[Window]:
    check_stride(window, stride)
    margin = (window - stride) // 2
    windows = []
    for score_start in range(0, length, stride):
        start = max(0, min(score_start - margin, length - window))
        windows.append(Window(start, min(start + window, length), score_start,
                              min(score_start + stride, length)))
    return windows
