"""T5-style infilling for span-corruption models.

Training fed `corrupted input [EOS]` as a bidirectional prefix, each removed span replaced
by the next sentinel `<extra_id_k>` (k = 0, 1, … in order), and taught the model to generate
`<extra_id_0> span0 <extra_id_1> span1 … [EOS]`. Users mark the gaps with [X], [Y], [Z]
and/or `<extra_id_N>`; each mark, in order of appearance, becomes the next sentinel. A text
with no mark gets one at its end, which asks the model to continue it (T5's last span often
ends the text).
"""

from __future__ import annotations

import re

from lmlab.data.special_tokens import SpecialTokens

GAP = re.compile(r"\[[XYZ]\]|<extra_id_\d+>")
# Marks that look meant as gaps but are not lmlab's syntax: [W], [MASK], <mask>, <X>,
# <extra_id_x>, [SENTINEL_0] ...
GAP_LIKE = re.compile(r"\[[A-Z][A-Z0-9_]*\]|<extra_id[^>]*>|<(?:mask|MASK|[A-Z])>|"
                      r"<sentinel[^>]*>")
SYNTAX = "[X], [Y], [Z] or <extra_id_0>, <extra_id_1>, …"


def has_gaps(text: str) -> bool:
    """Whether `text` marks gaps; a mark in an unknown syntax is a one-line error."""
    for leftover in GAP.split(text):
        odd = GAP_LIKE.search(leftover)
        if odd:
            raise ValueError(f"unknown sentinel syntax {odd.group()!r} in the prompt; mark gaps "
                             f"with {SYNTAX}")
    return GAP.search(text) is not None


def with_sentinels(text: str, sentinels: int) -> tuple[str, int]:
    """(`text` with its k-th gap written `<extra_id_k>`, number of gaps); a text without a
    gap gets one at its end, to be continued."""
    if not has_gaps(text):
        text += "<extra_id_0>"
    # A gap stands for whole words, and a word owns the space before it (byte-level BPE's
    # "Ġfox", SentencePiece's "▁fox"), so the gap takes that space.
    pieces = GAP.split(re.sub(" (?=" + GAP.pattern + ")", "", text))
    gaps = len(pieces) - 1
    if gaps > sentinels:
        raise ValueError(f"the prompt has {gaps} gaps; the vocabulary has only {sentinels} "
                         "sentinel tokens")
    marked = "".join(piece + (f"<extra_id_{k}>" if k < gaps else "")
                     for k, piece in enumerate(pieces))
    return marked, gaps


def split_spans(generated: list[int], special: SpecialTokens, gaps: int) -> list[list[int]]:
    """`<extra_id_0> a b <extra_id_1> c [EOS]` → [[a, b], [c]], one list per gap (empty for a
    gap the model left unfilled); anything after the last gap's span is dropped."""
    spans: list[list[int]] = [[] for _ in range(gaps)]
    sentinel_index = {token: k for k, token in enumerate(special.sentinels)}
    current = None
    for token in generated:
        if token == special.eos:
            break
        if token in sentinel_index:
            current = sentinel_index[token]
            if current >= gaps:
                break
        elif current is not None:
            spans[current].append(token)
    return spans


def splice(prompt: list[int], spans: list[list[int]], special: SpecialTokens) -> list[int]:
    """The prompt's ids with sentinel k replaced by span k: the infilled text, as tokens."""
    sentinel_index = {token: k for k, token in enumerate(special.sentinels)}
    out: list[int] = []
    for token in prompt:
        k = sentinel_index.get(token)
        out.extend(spans[k] if k is not None and k < len(spans) else [token])
    return out
