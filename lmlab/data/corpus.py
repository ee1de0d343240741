"""Reading documents from the user's files: .txt (a file per document, or blank-line
separated documents), .jsonl (a text field), each optionally gzip-compressed; a source may be
a file, a directory (read recursively, in sorted order) or a glob."""

from __future__ import annotations

import glob
import gzip
import json
from collections.abc import Iterator
from pathlib import Path

from lmlab.data.errors import DataError

SUFFIXES = (".txt", ".jsonl", ".txt.gz", ".jsonl.gz")


def _kind(path: Path) -> str | None:
    name = path.name.lower()
    return next((s for s in SUFFIXES if name.endswith(s)), None)


def expand_sources(sources: list[str]) -> list[Path]:
    """Every readable file the sources name, in a stable order."""
    files: list[Path] = []
    for source in sources:
        path = Path(source)
        if path.is_dir():
            files.extend(sorted(p for p in path.rglob("*") if p.is_file() and _kind(p)))
        elif path.is_file():
            if not _kind(path):
                raise DataError(f"{path}: unsupported file type (use {', '.join(SUFFIXES)})")
            files.append(path)
        else:
            matches = sorted(Path(p) for p in glob.glob(source) if _kind(Path(p)))
            if not matches:
                raise DataError(f"{source}: no such file, directory or matching glob")
            files.extend(matches)
    return files


def _open_text(path: Path):
    opener = gzip.open if path.name.endswith(".gz") else open
    return opener(path, "rt", encoding="utf-8", errors="replace")


def _looks_binary(path: Path) -> bool:
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            return b"\x00" in f.read(4096)
    except OSError as error:
        raise DataError(f"{path}: cannot be read ({error})") from None


def read_documents(path: Path, text_field: str = "text",
                   blank_line_documents: bool = False) -> Iterator[str]:
    """Stream the documents of one file."""
    if _looks_binary(path):
        raise DataError(f"{path}: looks like a binary file, not text")
    with _open_text(path) as f:
        if _kind(path).startswith(".jsonl"):
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    raise DataError(f"{path}:{number}: not valid JSON") from None
                if not isinstance(record, dict) or text_field not in record:
                    raise DataError(f"{path}:{number}: no {text_field!r} field")
                yield str(record[text_field])
        elif blank_line_documents:
            paragraph: list[str] = []
            for line in f:
                if line.strip():
                    paragraph.append(line)
                elif paragraph:
                    yield "".join(paragraph)
                    paragraph = []
            if paragraph:
                yield "".join(paragraph)
        else:
            yield f.read()


def read_sources(sources: list[str], text_field: str = "text",
                 blank_line_documents: bool = False) -> Iterator[str]:
    for path in expand_sources(sources):
        yield from read_documents(path, text_field, blank_line_documents)
