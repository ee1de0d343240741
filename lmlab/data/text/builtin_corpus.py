"""The built-in default corpus: English prose that every Python installation ships.

The standard library's docstrings (read from source with `ast`, never imported, so no module
runs) and the `pydoc_data` help topics: about 2 MB, enough for a first pre-training run with no
download.
"""

from __future__ import annotations

import ast
import sysconfig
from collections.abc import Iterator
from pathlib import Path

MIN_DOCUMENT_CHARS = 200  # shorter docstrings are mostly one-line summaries


def _docstrings(tree: ast.Module) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node)
            if doc:
                yield doc


def stdlib_documents() -> Iterator[str]:
    """One document per standard-library module: its docstrings, in source order."""
    root = Path(sysconfig.get_paths()["stdlib"])
    for path in sorted(root.rglob("*.py")):
        parts = set(path.relative_to(root).parts)
        if parts & {"site-packages", "test", "tests", "idle_test", "lib2to3"}:
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue  # a few stdlib files are deliberately broken (test fixtures, templates)
        document = "\n\n".join(_docstrings(tree))
        if len(document) >= MIN_DOCUMENT_CHARS:
            yield document


def pydoc_topic_documents() -> Iterator[str]:
    """The language reference sections shipped for `help()`."""
    from pydoc_data.topics import topics

    for name in sorted(topics):
        if len(topics[name]) >= MIN_DOCUMENT_CHARS:
            yield topics[name]


def builtin_documents() -> Iterator[str]:
    yield from pydoc_topic_documents()
    yield from stdlib_documents()
