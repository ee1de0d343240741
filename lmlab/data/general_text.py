"""General English for measuring what a continued model forgets: the built-in corpus (Python's
documentation prose, lmlab.data.text.builtin_corpus) tokenised with the continued model's own
tokenizer, as far as a validation needs."""

from __future__ import annotations

from itertools import islice

import numpy as np
from tokenizers import Tokenizer

from lmlab.data.dataset import Dataset, in_memory_dataset
from lmlab.data.special_tokens import SpecialTokens
from lmlab.data.text.builtin_corpus import builtin_documents

ENCODED_AT_ONCE = 64  # documents per encode_batch call


def general_text(tokenizer_json: str, special: SpecialTokens, tokens: int) -> Dataset:
    """A dataset whose validation split holds at least `tokens` tokens of the built-in corpus
    (fewer if the corpus runs out) in `tokenizer_json`'s vocabulary, with its bytes per token
    (for bits per byte) from the text encoded."""
    tokenizer = Tokenizer.from_str(tokenizer_json)
    texts = builtin_documents()
    documents, count, text_bytes = [], 0, 0
    while count < tokens and (chunk := list(islice(texts, ENCODED_AT_ONCE))):
        encodings = tokenizer.encode_batch(chunk, add_special_tokens=False)
        for text, encoding in zip(chunk, encodings, strict=True):
            documents.append(np.asarray(encoding.ids, dtype=np.int64))
            count, text_bytes = count + len(encoding.ids), text_bytes + len(text.encode())
    dataset = in_memory_dataset(documents, documents, special, text_bytes / max(count, 1))
    dataset.tokenizer_json = tokenizer_json
    return dataset
