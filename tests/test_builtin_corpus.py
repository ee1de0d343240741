"""The built-in corpus is real English prose, found offline, in a stable order."""

from itertools import islice

from lmlab.data.text.builtin_corpus import (
    MIN_DOCUMENT_CHARS,
    pydoc_topic_documents,
    stdlib_documents,
)


def test_pydoc_topics_are_substantial_english():
    topics = list(pydoc_topic_documents())
    assert len(topics) > 50 and sum(map(len, topics)) > 300_000
    assert all(len(doc) >= MIN_DOCUMENT_CHARS for doc in topics)
    assert sum(doc.count(" the ") for doc in topics) > 1000


def test_stdlib_docstrings_are_read_without_importing_in_a_stable_order():
    first = list(islice(stdlib_documents(), 15))
    assert first == list(islice(stdlib_documents(), 15))
    assert len(first) == 15 and all(len(doc) >= MIN_DOCUMENT_CHARS for doc in first)
