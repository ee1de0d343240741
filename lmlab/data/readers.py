"""Reading documents from the user's files: each source streams out as text documents.

Formats, chosen by suffix: `.txt` (a whole file per document, or blank-line-separated
documents), `.jsonl` / `.json` (a field of each object; a `.json` file may hold one array of
objects), `.csv` / `.tsv` (a column, named in the header row) and `.parquet` (a column, read a
batch at a time). The text formats may be compressed: `.gz` (gzip) or `.zst` (Zstandard). A
source is a file, a directory (read recursively, in sorted order) or a glob. Everything
streams: memory holds one record (one batch for Parquet), never a file, except a `.txt` read
as one document.

Bad records (a line that is not JSON, an object without the text field, a CSV row that does not
parse) are skipped and counted; `strict=True` makes the first one fatal. A file where more than
TOLERATED_BAD_FRACTION of the records are bad fails anyway: that is a wrong format or field
name, not noise.
"""

from __future__ import annotations

import csv
import glob
import gzip
import io
import json
import re
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import zstandard

from lmlab.data.errors import DataError

TEXT_FORMATS = (".txt", ".jsonl", ".json", ".csv", ".tsv")
COMPRESSIONS = (".gz", ".zst")
TOLERATED_BAD_FRACTION = 0.01
BINARY_SNIFF_BYTES = 1024
PARQUET_BATCH_ROWS = 1024
JSON_READ_CHARS = 1 << 16
WHITESPACE = re.compile(r"[ \t\r\n]*")
ARRAY_GAP = re.compile(r"[ \t\r\n,]*")  # between array elements
ESCAPED_BYTE = re.compile("[\udc80-\udcff]")  # an invalid byte, as surrogateescape keeps it


@dataclass(frozen=True)
class ReadOptions:
    """How to find the text in each file.

    `text_field` names the JSON field, the CSV/TSV column or the Parquet column.
    """

    text_field: str = "text"
    blank_line_documents: bool = False
    strict: bool = False


@dataclass
class ReadStats:
    """What reading saw, summed over the files read with it."""

    files: int = 0
    documents: int = 0
    invalid_utf8_documents: int = 0  # decoded with U+FFFD in place of the bad bytes
    invalid_utf8_bytes: int = 0  # the bytes replaced, one U+FFFD each
    skipped: Counter = field(default_factory=Counter)  # reason -> records skipped


# ---------------------------------------------------------------- sources and files


def _format_of(path: Path) -> str | None:
    """The base format suffix (`.jsonl` for `x.jsonl.zst`), or None for files we cannot read."""
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes[-1:] == [".parquet"]:
        return ".parquet"
    if suffixes[-1:] and suffixes[-1] in COMPRESSIONS:
        suffixes = suffixes[:-1]
    return suffixes[-1] if suffixes[-1:] and suffixes[-1] in TEXT_FORMATS else None


def source_files(pattern: str) -> list[Path]:
    """The readable files a path, directory or glob names, in sorted order."""
    path = Path(pattern)
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and _format_of(p))
        if not files:
            raise DataError(f"{pattern}: no .txt, .jsonl, .json, .csv, .tsv or .parquet files "
                            "(optionally .gz or .zst) in this directory")
        return files
    if path.is_file():
        if not _format_of(path):
            raise DataError(f"{pattern}: unsupported file type; use .txt, .jsonl, .json, "
                            ".csv, .tsv (optionally .gz or .zst) or .parquet")
        return [path]
    if not any(c in pattern for c in "*?["):
        raise DataError(f"{pattern}: no such file or directory")
    files = sorted(Path(p) for p in glob.glob(pattern, recursive=True)
                   if Path(p).is_file() and _format_of(Path(p)))
    if not files:
        raise DataError(f"{pattern}: no readable file matches this glob")
    return files


def expand_sources(sources: Sequence[str]) -> list[Path]:
    """Every file the sources (plain paths, directories or globs) name, in a stable order."""
    return [file for source in sources for file in source_files(source)]


# ---------------------------------------------------------------- byte streams and lines


def _open_bytes(path: Path) -> BinaryIO:
    """The decompressed bytes of `path`, buffered so that it iterates by line."""
    name = path.name.lower()
    if name.endswith(".gz"):
        return gzip.open(path, "rb")
    if name.endswith(".zst"):
        reader = zstandard.ZstdDecompressor().stream_reader(open(path, "rb"), closefd=True)
        return io.BufferedReader(reader)
    return open(path, "rb")


def _check_text(path: Path) -> None:
    with _open_bytes(path) as stream:
        if b"\x00" in stream.read(BINARY_SNIFF_BYTES):
            raise DataError("looks like a binary file (NUL bytes in the first KB), not UTF-8 "
                            "text", path)


def _decode(raw: bytes) -> str:
    """UTF-8 text, an invalid byte kept as a surrogate escape for `_Records.accept` to count and
    replace in the document it ends up in."""
    return raw.decode("utf-8", errors="surrogateescape")


def _lines(stream: BinaryIO) -> Iterator[tuple[int, str]]:
    """(line number, text with its line ending)."""
    for number, raw in enumerate(stream, 1):
        text = _decode(raw)
        if number == 1:
            text = text.removeprefix("\ufeff")  # a byte-order mark is not content
        yield number, text


# ---------------------------------------------------------------- bad records


class _Records:
    """Counts a file's records and bad records; fails at once (strict) or when bad is common."""

    def __init__(self, path: Path, options: ReadOptions, stats: ReadStats):
        self.path, self.options, self.stats = path, options, stats
        self.good = 0
        self.bad = 0
        self.first_bad: DataError | None = None

    def accept(self, text: str) -> str:
        """`text` as a document, each invalid UTF-8 byte replaced by U+FFFD and counted: one
        character per byte, so that the size of the input can be told from the text."""
        text, invalid = ESCAPED_BYTE.subn("\ufffd", text)
        self.good += 1
        self.stats.documents += 1
        self.stats.invalid_utf8_documents += invalid > 0
        self.stats.invalid_utf8_bytes += invalid
        return text

    def reject(self, reason: str, message: str, line: int | None) -> None:
        error = DataError(message, self.path, line)
        if self.options.strict:
            raise error
        self.bad += 1
        self.stats.skipped[reason] += 1
        self.first_bad = self.first_bad or error

    def finish(self) -> None:
        total = self.good + self.bad
        if self.bad and self.bad > TOLERATED_BAD_FRACTION * total:
            raise DataError(f"{self.first_bad} ({self.bad} of {total} records bad: more than "
                            f"{TOLERATED_BAD_FRACTION:.0%} means a wrong format or field, not "
                            "noise)")


# ---------------------------------------------------------------- one reader per format


def _read_txt(path: Path, options: ReadOptions, records: _Records) -> Iterator[str]:
    with _open_bytes(path) as stream:
        if not options.blank_line_documents:
            yield records.accept(_decode(stream.read()).removeprefix("\ufeff"))
            return
        paragraph: list[str] = []
        for _, line in _lines(stream):
            if line.strip():
                paragraph.append(line.rstrip("\r\n"))
            elif paragraph:
                yield records.accept("\n".join(paragraph))
                paragraph = []
        if paragraph:
            yield records.accept("\n".join(paragraph))


def _text_of(record: object, options: ReadOptions, records: _Records,
             line: int) -> str | None:
    """The text field of one JSON value, or None after counting why it has none."""
    name = options.text_field
    if not isinstance(record, dict):
        records.reject("not_an_object", f"expected a JSON object, got {type(record).__name__}",
                       line)
    elif name not in record:
        records.reject("missing_field", f"no {name!r} field (fields: "
                       f"{', '.join(map(str, record)) or 'none'})", line)
    elif not isinstance(record[name], str):
        records.reject("not_text", f"the {name!r} field is {type(record[name]).__name__}, "
                       "not a string", line)
    else:
        return record[name]
    return None


def _read_jsonl(path: Path, options: ReadOptions, records: _Records) -> Iterator[str]:
    with _open_bytes(path) as stream:
        for number, line in _lines(stream):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                records.reject("not_json", "not valid JSON", number)
                continue
            text = _text_of(record, options, records, number)
            if text is not None:
                yield records.accept(text)


def _json_values(stream: io.TextIOBase, path: Path) -> Iterator[tuple[int, object]]:
    """(line number, value) for each element of a top-level array, or each top-level value.

    Decodes values with `raw_decode` as they complete in a growing window of the file, so a
    large array never sits in memory whole.
    """
    decoder = json.JSONDecoder()
    buffer, position, line = "", 0, 1  # `line` is the line of buffer[position]
    at_end, in_array = False, None

    def read_more() -> None:
        nonlocal buffer, position, at_end
        # Read at least as much as is pending, so a huge value is re-parsed O(log n) times.
        chunk = stream.read(max(JSON_READ_CHARS, len(buffer) - position))
        at_end = not chunk
        buffer, position = buffer[position:] + chunk, 0

    while True:
        gap = (ARRAY_GAP if in_array else WHITESPACE).match(buffer, position).end()
        line += buffer.count("\n", position, gap)
        position = gap
        if position == len(buffer):
            if not at_end:
                read_more()
                continue
            if in_array:
                raise DataError("the JSON array is never closed with ']'", path, line)
            return
        if in_array is None:
            in_array = buffer[position] == "["
            position += in_array
            continue
        if in_array and buffer[position] == "]":
            return
        try:
            value, end = decoder.raw_decode(buffer, position)
        except json.JSONDecodeError as error:
            if at_end:
                raise DataError("not valid JSON", path,
                                line + buffer.count("\n", position, error.pos)) from None
            read_more()  # the value may go on in the part not read yet
            continue
        yield line, value
        line += buffer.count("\n", position, end)
        position = end


def _read_json(path: Path, options: ReadOptions, records: _Records) -> Iterator[str]:
    with io.TextIOWrapper(_open_bytes(path), encoding="utf-8-sig",
                          errors="surrogateescape") as stream:
        for line, value in _json_values(stream, path):
            text = _text_of(value, options, records, line)
            if text is not None:
                yield records.accept(text)


def _read_delimited(path: Path, options: ReadOptions, records: _Records) -> Iterator[str]:
    # Documents are longer than csv's default 128 KiB field limit; the limit is process-wide,
    # and raising it only lets more through.
    csv.field_size_limit(max(csv.field_size_limit(), 2**31 - 1))
    tsv = _format_of(path) == ".tsv"
    with _open_bytes(path) as stream:
        last_line = [""]  # the line the latest record ends on

        def lines() -> Iterator[str]:
            for _, line in _lines(stream):
                last_line[0] = line
                yield line

        # TSV has no quoting (IANA text/tab-separated-values): a '"' in a TSV cell is text.
        reader = csv.reader(lines(), delimiter="\t" if tsv else ",",
                            quoting=csv.QUOTE_NONE if tsv else csv.QUOTE_MINIMAL)
        header = next(reader, None)
        if header is None:
            return
        if options.text_field not in header:
            raise DataError(f"no {options.text_field!r} column (columns: {', '.join(header)})",
                            path, 1)
        column = header.index(options.text_field)
        while True:
            start = reader.line_num + 1
            try:
                row = next(reader)
            except StopIteration:
                return
            except csv.Error as error:
                records.reject("bad_row", f"cannot parse the row ({error})", reader.line_num)
                continue
            if not row:
                continue
            if not tsv and quote_never_closed(start, reader.line_num, last_line[0]):
                raise DataError(UNCLOSED_QUOTE, path, start)
            if column >= len(row):
                records.reject("short_row", f"the row has {len(row)} cells, so no "
                               f"{options.text_field!r}", reader.line_num)
                continue
            yield records.accept(row[column])


UNCLOSED_QUOTE = ("a quote opened in this row is never closed, so the rest of the file was "
                  "read as one cell")


def quote_never_closed(first_line: int, last_line_number: int, last_line: str) -> bool:
    """Whether a CSV row read from `first_line` to `last_line_number` ran into the end of the
    file inside a quote: a quoted cell over several lines ends with a quote on its last line."""
    return last_line_number > first_line and '"' not in last_line


def _read_parquet(path: Path, options: ReadOptions, records: _Records) -> Iterator[str]:
    import pyarrow  # heavy, and only Parquet sources need it
    import pyarrow.parquet

    try:
        table = pyarrow.parquet.ParquetFile(path)
    except pyarrow.ArrowException as error:
        raise DataError(f"not a readable Parquet file ({error})", path) from None
    names = table.schema_arrow.names
    if options.text_field not in names:
        raise DataError(f"no {options.text_field!r} column (columns: {', '.join(names)})", path)
    row = 0
    for batch in table.iter_batches(PARQUET_BATCH_ROWS, columns=[options.text_field]):
        for value in batch.column(0).to_pylist():
            row += 1
            if isinstance(value, bytes):
                value = _decode(value)
            if not isinstance(value, str):
                records.reject("not_text", f"row {row}: the {options.text_field!r} column "
                               f"holds {type(value).__name__}, not a string", None)
                continue
            yield records.accept(value)


READERS: dict[str, Callable[[Path, ReadOptions, _Records], Iterator[str]]] = {
    ".txt": _read_txt, ".jsonl": _read_jsonl, ".json": _read_json, ".csv": _read_delimited,
    ".tsv": _read_delimited, ".parquet": _read_parquet,
}


def read_file(path: Path, options: ReadOptions = ReadOptions(),
              stats: ReadStats | None = None) -> Iterator[str]:
    """Stream the documents of one file, counting into `stats`."""
    path = Path(path)
    kind = _format_of(path)
    if kind is None:
        raise DataError("unsupported file type", path)
    stats = ReadStats() if stats is None else stats
    records = _Records(path, options, stats)
    try:
        if kind != ".parquet":
            _check_text(path)
        stats.files += 1
        yield from READERS[kind](path, options, records)
    except (OSError, EOFError, zstandard.ZstdError) as error:
        raise DataError(f"cannot be read ({error})", path) from None
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
