"""One reader per file format, each streaming a file's records as rows (field name → value);
lmlab/data/text/readers.py chooses between them by suffix and is the way in.

A row's strings may still hold invalid UTF-8 bytes, kept as surrogate escapes: `Records`
replaces them (one U+FFFD a byte) and counts them in what the reader's consumer keeps, so a
skipped record's bytes are never counted.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import re
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import BinaryIO, NamedTuple

import zstandard

from lmlab.data.errors import DataError
from lmlab.data.text.json_stream import json_values

TEXT_FORMATS = (".txt", ".jsonl", ".json", ".csv", ".tsv")
COMPRESSIONS = (".gz", ".zst")
TOLERATED_BAD_FRACTION = 0.01
BINARY_SNIFF_BYTES = 1024
PARQUET_BATCH_ROWS = 1024
ESCAPED_BYTE = re.compile("[\udc80-\udcff]")  # an invalid byte, as surrogateescape keeps it
UNCLOSED_QUOTE = "a quote opened in this row is never closed"
QUOTED_CELL_ENDS_EARLY = ("a cell that opens with a quote is quoted, so it must end at its closing "
                          'quote (a quote inside it is written "")')


@dataclass(frozen=True)
class ReadOptions:
    """How to find the text in each file, and how bad records are met.

    `text_field` names the JSON field, the CSV/TSV column or the Parquet column (and the one
    field of a `.txt` file's rows). `strict` makes the first bad record fatal.
    """

    text_field: str = "text"
    blank_line_documents: bool = False
    strict: bool = False


@dataclass
class ReadStats:
    """What reading saw, summed over the files read with it."""

    files: int = 0
    documents: int = 0  # records kept: documents, or rows
    invalid_utf8_documents: int = 0  # decoded with U+FFFD in place of the bad bytes
    invalid_utf8_bytes: int = 0  # the bytes replaced, one U+FFFD each
    skipped: Counter = field(default_factory=Counter)  # reason -> records skipped


class Record(NamedTuple):
    line: int | None  # where the record starts: its line, or a Parquet row's number
    fields: dict[str, object]


def file_format(path: Path) -> str | None:
    """The base format suffix (`.jsonl` for `x.jsonl.zst`), or None for files we cannot read."""
    suffixes = [s.lower() for s in Path(path).suffixes]
    if suffixes[-1:] == [".parquet"]:
        return ".parquet"
    if suffixes[-1:] and suffixes[-1] in COMPRESSIONS:
        suffixes = suffixes[:-1]
    return suffixes[-1] if suffixes[-1:] and suffixes[-1] in TEXT_FORMATS else None


# ---------------------------------------------------------------- byte streams and lines


def open_bytes(path: Path) -> BinaryIO:
    """The decompressed bytes of `path` (compression by its last suffix), buffered so that it
    iterates by line."""
    name = path.name.lower()
    if name.endswith(".gz"):
        return gzip.open(path, "rb")
    if name.endswith(".zst"):
        reader = zstandard.ZstdDecompressor().stream_reader(open(path, "rb"), closefd=True)
        return io.BufferedReader(reader)
    return open(path, "rb")


def check_text(path: Path) -> None:
    with open_bytes(path) as stream:
        if b"\x00" in stream.read(BINARY_SNIFF_BYTES):
            raise DataError("looks like a binary file (NUL bytes in the first KB), not UTF-8 "
                            "text", path)


def decode(raw: bytes) -> str:
    """UTF-8 text, an invalid byte kept as a surrogate escape for `Records` to count and
    replace in what is kept."""
    return raw.decode("utf-8", errors="surrogateescape")


def lines(stream: BinaryIO) -> Iterator[tuple[int, str]]:
    """(line number, text with its line ending)."""
    for number, raw in enumerate(stream, 1):
        text = decode(raw)
        if number == 1:
            text = text.removeprefix("\ufeff")  # a byte-order mark is not content
        yield number, text


def replace_invalid(value: object) -> tuple[object, int]:
    """`value` with each invalid byte in its strings (nested ones too) replaced by U+FFFD: one
    character per byte, so that the size of the input can be told from the text."""
    if isinstance(value, str):
        return ESCAPED_BYTE.subn("\ufffd", value)
    if isinstance(value, dict | list):
        items = value.items() if isinstance(value, dict) else enumerate(value)
        cleaned = {key: replace_invalid(item) for key, item in items}
        invalid = sum(count for _, count in cleaned.values())
        if isinstance(value, dict):
            return {key: item for key, (item, _) in cleaned.items()}, invalid
        return [item for item, _ in cleaned.values()], invalid
    return value, 0


# ---------------------------------------------------------------- bad records


class Records:
    """Counts a file's kept and bad records; fails at once (strict) or when bad is common."""

    def __init__(self, path: Path, options: ReadOptions, stats: ReadStats):
        self.path, self.options, self.stats = path, options, stats
        self.good = 0
        self.bad = 0
        self.first_bad: DataError | None = None

    def accept(self, value: object) -> object:
        """`value` (a document, or a row's fields) as kept, its invalid bytes replaced and
        counted."""
        value, invalid = replace_invalid(value)
        self.good += 1
        self.stats.documents += 1
        self.stats.invalid_utf8_documents += invalid > 0
        self.stats.invalid_utf8_bytes += invalid
        return value

    def reject(self, reason: str, message: str, line: int | None) -> None:
        error = DataError(message, self.path, line)
        if self.options.strict:
            raise error
        self.bad += 1
        self.stats.skipped[reason] += 1
        self.first_bad = self.first_bad or error

    def an_object(self, value: object, line: int) -> Record | None:
        """A JSON value as a row, or None after counting that it is no object."""
        if isinstance(value, dict):
            return Record(line, value)
        self.reject("not_an_object", f"expected a JSON object, got {type(value).__name__}",
                    line)
        return None

    def finish(self) -> None:
        total = self.good + self.bad
        if self.bad and self.bad > TOLERATED_BAD_FRACTION * total:
            raise DataError(f"{self.first_bad} ({self.bad} of {total} records bad: more than "
                            f"{TOLERATED_BAD_FRACTION:.0%} means a wrong format or field, not "
                            "noise)")


def check_columns(wanted: Sequence[str] | None, columns: Sequence[str], path: Path,
                  line: int | None) -> None:
    """A table without a column its reader needs is the wrong file, not a bad record."""
    for name in wanted or ():
        if name not in columns:
            raise DataError(f"no {name!r} column (columns: {', '.join(columns)})", path, line)


# ---------------------------------------------------------------- one reader per format
# Each takes (path, options, records, columns): `columns` are those a table must have (for
# Parquet, the only ones read; None: all).


def _txt_rows(path: Path, options: ReadOptions, records: Records,
              columns: Sequence[str] | None) -> Iterator[Record]:
    key = options.text_field
    with open_bytes(path) as stream:
        if not options.blank_line_documents:
            yield Record(1, {key: decode(stream.read()).removeprefix("\ufeff")})
            return
        paragraph: list[str] = []
        for number, line in lines(stream):
            if line.strip():
                paragraph.append(line.rstrip("\r\n"))
            elif paragraph:
                yield Record(number - len(paragraph), {key: "\n".join(paragraph)})
                paragraph = []
        if paragraph:
            yield Record(number + 1 - len(paragraph), {key: "\n".join(paragraph)})


def _jsonl_rows(path: Path, options: ReadOptions, records: Records,
                columns: Sequence[str] | None) -> Iterator[Record]:
    with open_bytes(path) as stream:
        for number, line in lines(stream):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError:
                records.reject("not_json", "not valid JSON", number)
                continue
            if (row := records.an_object(value, number)) is not None:
                yield row


def _json_rows(path: Path, options: ReadOptions, records: Records,
               columns: Sequence[str] | None) -> Iterator[Record]:
    with io.TextIOWrapper(open_bytes(path), encoding="utf-8-sig",
                          errors="surrogateescape") as stream:
        for line, value in json_values(stream, path):
            if (row := records.an_object(value, line)) is not None:
                yield row


def _table_records(numbered: Iterator[tuple[int, str]], delimiter: str,
                   records: Records) -> Iterator[tuple[int, list[str]]]:
    """(first line, cells) of each record, read as Python's csv module and pandas write tables:
    a cell that opens with a quote is quoted (a quote inside it doubled, a delimiter or line
    break inside it text); a quote later in a cell is text. A record whose quoting does not
    parse is counted bad at its first line, and reading goes on from the line after it, so one
    stray quote costs one record, never the rest of the file."""
    again: list[tuple[int, str]] = []  # lines to read once more, the next one last
    taken: list[tuple[int, str]] = []  # the lines of the record being read
    ran_out = False

    def feed() -> Iterator[str]:
        nonlocal ran_out
        while (item := again.pop() if again else next(numbered, None)) is not None:
            taken.append(item)
            yield item[1]
        ran_out = True

    reader = csv.reader(feed(), delimiter=delimiter, strict=True)
    while True:
        taken.clear()
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as error:
            records.reject("bad_row", _parse_problem(error, ran_out), taken[0][0])
            again.extend(reversed(taken[1:]))
            ran_out = False
            reader = csv.reader(feed(), delimiter=delimiter, strict=True)
            continue
        yield taken[0][0], cells


def _parse_problem(error: csv.Error, ran_out: bool) -> str:
    if ran_out:
        return UNCLOSED_QUOTE
    if "expected after" in str(error):  # csv's words for text after a closing quote
        return QUOTED_CELL_ENDS_EARLY
    return f"cannot parse the row ({error})"


def _delimited_rows(path: Path, options: ReadOptions, records: Records,
                    columns: Sequence[str] | None, delimiter: str) -> Iterator[Record]:
    """Rows keyed by the header (names stripped); a row of blank cells is no record."""
    # Documents are longer than csv's default 128 KiB field limit; the limit is process-wide,
    # and raising it only lets more through.
    csv.field_size_limit(max(csv.field_size_limit(), 2**31 - 1))
    with open_bytes(path) as stream:
        header: list[str] | None = None
        for start, cells in _table_records(lines(stream), delimiter, records):
            if header is None:
                header = [name.strip() for name in cells]
                check_columns(columns, header, path, 1)
            elif not any(cell.strip() for cell in cells):
                continue
            elif len(cells) != len(header):
                records.reject("wrong_width", f"{len(cells)} fields, the header has "
                               f"{len(header)}", start)
            else:
                yield Record(start, dict(zip(header, cells, strict=True)))


def _parquet_rows(path: Path, options: ReadOptions, records: Records,
                  columns: Sequence[str] | None) -> Iterator[Record]:
    import pyarrow  # heavy, and only Parquet sources need it
    import pyarrow.parquet

    try:
        table = pyarrow.parquet.ParquetFile(path)
    except pyarrow.ArrowException as error:
        raise DataError(f"not a readable Parquet file ({error})", path) from None
    check_columns(columns, table.schema_arrow.names, path, None)
    number = 0
    for batch in table.iter_batches(PARQUET_BATCH_ROWS, columns=columns and list(columns)):
        for fields in batch.to_pylist():
            number += 1
            yield Record(number, {name: decode(value) if isinstance(value, bytes) else value
                               for name, value in fields.items()})


ROW_READERS: dict[str, Callable[..., Iterator[Record]]] = {
    ".txt": _txt_rows, ".jsonl": _jsonl_rows, ".json": _json_rows,
    ".csv": partial(_delimited_rows, delimiter=","),
    ".tsv": partial(_delimited_rows, delimiter="\t"),
    ".parquet": _parquet_rows,
}
