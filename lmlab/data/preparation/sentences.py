"""Sentence boundaries, found in the text and recorded as token offsets.

The rule is deliberately simple and predictable:

    punctuation   a sentence ends at `.`, `!`, `?` or `…` (optionally followed by closing
                  quotes or brackets) followed by whitespace, and at every line break
    lines         a sentence ends at every line break (one sentence per line)

So "Mr. Smith" is two sentences under `punctuation`; corpora with one sentence per line are
better read with `lines`. A boundary becomes a token offset through the tokenizer's own
alignment: the next sentence starts at the token holding its first character, so the tokens
are exactly those of the whole document, encoded once.
"""

from __future__ import annotations

import re

from tokenizers import Encoding

RULES = {
    "punctuation": re.compile(r"[.!?…][\"'”’)\]]*\s+|\n\s*"),
    "lines": re.compile(r"\n\s*"),
}


def sentence_starts(text: str, rule: str = "punctuation") -> list[int]:
    """Character offsets where the second, third, ... sentence of `text` starts."""
    return [m.end() for m in RULES[rule].finditer(text) if m.end() < len(text)]


def token_starts(encoding: Encoding, char_starts: list[int]) -> list[int]:
    """Token offsets of sentence starts after the first, strictly increasing.

    A boundary whose character no token holds (the tokenizer dropped it), or that falls inside
    the token where the previous sentence starts, joins its sentence to the one before.
    """
    starts, last = [], 0
    for char in char_starts:
        token = encoding.char_to_token(char)
        if token is not None and token > last:
            starts.append(token)
            last = token
    return starts
