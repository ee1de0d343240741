"""Generated tokens → text released piece by piece, safe to print as it comes.

Byte-level BPE tokens can split a character's UTF-8 bytes, so the decoding of a token list
may end in U+FFFD until the character's last byte arrives; such a tail is held back. Text
that might be the start of a stop string is held back too, so a stop string is never
printed.
"""

from __future__ import annotations

from collections.abc import Sequence

from tokenizers import Tokenizer

INCOMPLETE = "\ufffd"


class IncrementalText:
    def __init__(self, tokenizer: Tokenizer, stop: Sequence[str] = ()) -> None:
        self.tokenizer = tokenizer
        self.stop = tuple(s for s in stop if s)
        self.ids: list[int] = []
        self.text = ""  # everything decoded so far, cut before a stop string once one appears
        self.released = 0  # characters of `text` already handed out
        self.stopped = False

    def push(self, token_id: int) -> str:
        """Add one token; returns the text that became safe to show (often empty)."""
        self.ids.append(token_id)
        text = self.tokenizer.decode(self.ids)
        settled = len(text.rstrip(INCOMPLETE))
        hit = self._first_stop(text)
        if hit is not None:
            text, settled, self.stopped = text[:hit], hit, True
        else:
            settled -= self._possible_stop_start(text[:settled])
        self.text = text
        return self._release(settled)

    def flush(self) -> str:
        """The rest, held-back tails included: call when generation ends."""
        return self._release(len(self.text))

    def _release(self, end: int) -> str:
        piece = self.text[self.released:end]
        self.released = max(self.released, end)
        return piece

    def _first_stop(self, text: str) -> int | None:
        # A stop string can only be new where it overlaps text not yet released.
        window = max(0, self.released - max((len(s) for s in self.stop), default=0))
        hits = [i for i in (text.find(s, window) for s in self.stop) if i >= 0]
        return min(hits) if hits else None

    def _possible_stop_start(self, text: str) -> int:
        """Length of the longest tail of `text` that begins some stop string."""
        longest = 0
        for stop in self.stop:
            for size in range(min(len(stop) - 1, len(text)), longest, -1):
                if stop.startswith(text[-size:]):
                    longest = size
                    break
        return longest
