"""Streamed generation for the API: the options the CLI takes, checked before anything is
sent, then one event per piece of text with each of its tokens' top alternatives."""

from __future__ import annotations

import threading
from collections.abc import Iterator

from lmlab.infer.generate import GenerationOptions, generation_mode, stream
from lmlab.serve.errors import ApiError
from lmlab.serve.fields import bounded, field
from lmlab.serve.runs import ServedRun, token_texts

MAX_NEW_TOKENS = 512
ALTERNATIVES = 5
# Request fields passed to GenerationOptions, with their JSON types.
OPTIONS = {"temperature": float, "top_k": int, "top_p": float, "repetition_penalty": float,
           "greedy": bool, "seed": int, "stop": list, "truncate_left": bool,
           "ignore_eos": bool}


class Slots:
    """At most `size` generations at once; the others are refused (429), not queued, so a
    client learns at once that the server is busy."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.active = 0
        self.finished = 0
        self.cancelled = 0
        self._lock = threading.Lock()

    def take(self) -> None:
        with self._lock:
            if self.active >= self.size:
                raise ApiError(429, f"{self.size} generations are running, the most this "
                               "server runs at once; try again when one ends")
            self.active += 1

    def give_back(self, cancelled: bool) -> None:
        with self._lock:
            self.active -= 1
            self.finished += 1
            self.cancelled += cancelled


def events(served: ServedRun, body: dict) -> Iterator[dict]:
    """The generation's events. The first is computed before this returns, so that a prompt
    the run cannot take is an ApiError raised here, not in the middle of a stream."""
    run = served.run
    prompt = field(body, "prompt", str)
    max_new_tokens = bounded(body, "max_new_tokens", 50, 1, MAX_NEW_TOKENS)
    options = {name: field(body, name, kind) for name, kind in OPTIONS.items() if name in body}
    if "stop" in options and not all(isinstance(s, str) for s in options["stop"]):
        raise ApiError(400, "'stop' must be a list of strings")
    GenerationOptions(**options)  # checks the options as the CLI does
    run.require_tokenizer()
    generation_mode(run, prompt)  # refuses a run that cannot generate, with the CLI's reason
    steps: list[dict] = []  # the tokens chosen since the last piece of text

    def note(logits, chosen) -> None:
        probabilities = logits[0].float().softmax(-1)
        top, ids = probabilities.topk(min(ALTERNATIVES, len(probabilities)))
        token = int(chosen[0])
        texts = token_texts(run, [token, *ids.tolist()])
        steps.append({"token": texts[0], "probability": float(probabilities[token]),
                      "alternatives": [{"token": text, "probability": p}
                                       for text, p in zip(texts[1:], top.tolist(), strict=True)]})

    pieces = stream(run, prompt, max_new_tokens, on_step=note, **options)
    first = next(pieces, None)
    return _events(first, pieces, steps)


def _events(piece: str | None, pieces: Iterator[str], steps: list[dict]) -> Iterator[dict]:
    """Closing this (the client left) closes the generation: no further token is computed."""
    try:
        while piece is not None:
            yield {"text": piece, "tokens": steps[:]}
            steps.clear()
            piece = next(pieces, None)
    finally:
        pieces.close()
