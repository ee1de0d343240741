"""Reading the user's files: the one way to read rows of text, for every consumer (prepare,
evaluation, fine-tuning, minimal pairs). Each file streams out as rows (field name → value),
as text documents (one field of each row), or, for formats of their own, as lines.

Formats, chosen by suffix: `.txt` (a whole file per document, or blank-line-separated
documents), `.jsonl` / `.json` (a field of each object; a `.json` file may hold one array of
objects), `.csv` / `.tsv` (a column, named in the header row) and `.parquet` (a column, read a
batch at a time). The text formats may be compressed: `.gz` (gzip) or `.zst` (Zstandard). A
source is a file, a directory (read recursively, in sorted order) or a glob. Everything
streams: memory holds one record (one batch for Parquet), never a file, except a `.txt` read
as one document.

CSV and TSV are read as Python's csv module and pandas write them (a cell opening with a quote
is quoted). Bad records (a line that is not JSON, an object without the text field, a CSV or TSV
row whose quoting does not parse or that has not the header's number of cells) are skipped and
counted; `strict=True` makes the first one fatal. A file where more than
TOLERATED_BAD_FRACTION of the records are bad fails anyway: that is a wrong format or field
name, not noise.
"""

from __future__ import annotations

import glob
from collections.abc import Iterator, Sequence
from pathlib import Path

import zstandard

from lmlab.data.errors import DataError
from lmlab.data.text.row_formats import (
    ROW_READERS,
    ReadOptions,
    ReadStats,
    Record,
    Records,
    check_text,
    file_format,
    lines,
    open_bytes,
    replace_invalid,
)

__all__ = ["ReadOptions", "ReadStats", "Record", "expand_sources", "file_format", "read_file",
           "read_lines", "read_rows", "read_sources", "source_files"]

DEFAULTS = ReadOptions()


# ---------------------------------------------------------------- sources


def source_files(pattern: str) -> list[Path]:
    """The readable files a path, directory or glob names, in sorted order."""
    path = Path(pattern)
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and file_format(p))
        if not files:
            raise DataError(f"{pattern}: no .txt, .jsonl, .json, .csv, .tsv or .parquet files "
                            "(optionally .gz or .zst) in this directory")
        return files
    if path.is_file():
        if not file_format(path):
            raise DataError(f"{pattern}: unsupported file type; use .txt, .jsonl, .json, "
                            ".csv, .tsv (optionally .gz or .zst) or .parquet")
        return [path]
    if not any(c in pattern for c in "*?["):
        raise DataError(f"{pattern}: no such file or directory")
    files = sorted(Path(p) for p in glob.glob(pattern, recursive=True)
                   if Path(p).is_file() and file_format(Path(p)))
    if not files:
        raise DataError(f"{pattern}: no readable file matches this glob")
    return files


def expand_sources(sources: Sequence[str]) -> list[Path]:
    """Every file the sources (plain paths, directories or globs) name, in a stable order."""
    return [file for source in sources for file in source_files(source)]


# ---------------------------------------------------------------- rows


def _rows(path: Path, options: ReadOptions, records: Records, columns: Sequence[str] | None,
          as_format: str | None) -> Iterator[Record]:
    """The file's rows as read, invalid bytes still escaped: the caller keeps or rejects each."""
    kind = as_format or file_format(path)
    if kind is None:
        raise DataError("unsupported file type", path)
    try:
        if kind != ".parquet":
            check_text(path)
        records.stats.files += 1
        yield from ROW_READERS[kind](path, options, records, columns)
    except (OSError, EOFError, zstandard.ZstdError) as error:
        reason = getattr(error, "strerror", None) or error
        raise DataError(f"cannot be read ({reason})", path) from None


def read_rows(path: str | Path, options: ReadOptions = DEFAULTS,
              stats: ReadStats | None = None, *, columns: Sequence[str] | None = None,
              as_format: str | None = None) -> Iterator[Record]:
    """Stream the rows of one file, counting into `stats`.

    `columns` are those a table (CSV, TSV, Parquet) must have; for Parquet, the only ones read.
    `as_format` reads the file as that format (".tsv") whatever its suffix says; compression
    still goes by the last suffix.
    """
    path = Path(path)
    records = Records(path, options, ReadStats() if stats is None else stats)
    for line, fields in _rows(path, options, records, columns, as_format):
        yield Record(line, records.accept(fields))
    records.finish()


def read_lines(path: str | Path, stats: ReadStats | None = None) -> Iterator[tuple[int, str]]:
    """(number, text without its ending) of each line of a text file in any compression, for
    formats that are not rows of fields; invalid bytes are replaced and counted into `stats`."""
    path, stats = Path(path), ReadStats() if stats is None else stats
    try:
        check_text(path)
        stats.files += 1
        with open_bytes(path) as stream:
            for number, line in lines(stream):
                text, invalid = replace_invalid(line.rstrip("\r\n"))
                stats.invalid_utf8_bytes += invalid
                yield number, text
    except (OSError, EOFError, zstandard.ZstdError) as error:
        reason = getattr(error, "strerror", None) or error
        raise DataError(f"cannot be read ({reason})", path) from None


# ---------------------------------------------------------------- text documents


def _text_of(row: Record, options: ReadOptions, records: Records) -> str | None:
    """The text field of one row, or None after counting why it has none."""
    name, fields = options.text_field, row.fields
    if name not in fields:
        records.reject("missing_field", f"no {name!r} field (fields: "
                       f"{', '.join(map(str, fields)) or 'none'})", row.line)
    elif not isinstance(fields[name], str):
        records.reject("not_text", f"the {name!r} field is {type(fields[name]).__name__}, "
                       "not a string", row.line)
    else:
        return fields[name]
    return None


def read_file(path: Path, options: ReadOptions = DEFAULTS,
              stats: ReadStats | None = None) -> Iterator[str]:
    """Stream the documents of one file (the text field of each row), counting into `stats`."""
    path = Path(path)
    records = Records(path, options, ReadStats() if stats is None else stats)
    for row in _rows(path, options, records, (options.text_field,), None):
        text = _text_of(row, options, records)
        if text is not None:
            yield records.accept(text)
    records.finish()


def read_sources(sources: Sequence[str], text_field: str = "text",
                 blank_line_documents: bool = False, *, strict: bool = False,
                 stats: ReadStats | None = None) -> Iterator[str]:
    """Stream the documents of every file the sources name; an empty corpus is an error."""
    options = ReadOptions(text_field, blank_line_documents, strict)
    stats = ReadStats() if stats is None else stats
    before = stats.documents
    for path in expand_sources(sources):
        yield from read_file(path, options, stats)
    if stats.documents == before:
        raise DataError(f"{' '.join(map(str, sources))}: the corpus is empty (no documents)")
