"""Readers for every format and compression, sources, bad input."""

import csv
import gzip
import io
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from lmlab.data.errors import DataError
from lmlab.data.text import json_stream, row_formats
from lmlab.data.text.readers import (
    ReadOptions,
    ReadStats,
    Record,
    expand_sources,
    read_file,
    read_lines,
    read_rows,
    read_sources,
)

DOCS = ["First document,\nwith two lines.", "Second — ünïcode “quotes”.", "Third, \"quoted\"."]


def write(path, data: bytes):
    """Write `data`, compressed as the name's last suffix asks."""
    if path.name.endswith(".gz"):
        data = gzip.compress(data)
    elif path.name.endswith(".zst"):
        data = zstandard.ZstdCompressor().compress(data)
    path.write_bytes(data)
    return path


def jsonl(docs, field="text"):
    return "".join(json.dumps({field: d, "id": i}) + "\n" for i, d in enumerate(docs)).encode()


def csv_bytes(docs):
    quoted = ['"' + d.replace('"', '""') + '"' for d in docs]
    return ("id,text\n" + "".join(f"{i},{q}\n" for i, q in enumerate(quoted))).encode()


def read(path, **options):
    return list(read_file(path, ReadOptions(**options)))


def one_line_error(match, call):
    with pytest.raises(DataError) as caught:
        call()
    message = str(caught.value)
    assert "\n" not in message and match in message, message
    return message


# ---------------------------------------------------------------- every reader


@pytest.mark.parametrize("compression", ["", ".gz", ".zst"])
def test_each_text_format_reads_the_same_documents_compressed_or_not(tmp_path, compression):
    flat = [d.replace("\n", " ") for d in DOCS]
    files = {
        "a.jsonl": jsonl(DOCS),
        "a.json": json.dumps([{"text": d} for d in DOCS], indent=2).encode(),
        "a.csv": csv_bytes(DOCS),
        "a.tsv": ("id\ttext\n" + "".join(f"{i}\t{d}\n" for i, d in enumerate(flat))).encode(),
        "blank.txt": "\n\n".join(DOCS).encode(),
    }
    for name, data in files.items():
        path = write(tmp_path / (name + compression), data)
        expected = flat if name == "a.tsv" else DOCS
        assert read(path, blank_line_documents=name == "blank.txt") == expected, name
    whole = write(tmp_path / ("whole.txt" + compression), "\ufeffone file\n\none document".encode())
    assert read(whole) == ["one file\n\none document"]  # the byte-order mark is not text


def test_json_streams_an_array_across_read_chunks_and_accepts_bare_objects(tmp_path, monkeypatch):
    monkeypatch.setattr(json_stream, "JSON_READ_CHARS", 7)  # every value spans several reads
    docs = [f"document {i} " + "x" * (i * 5) for i in range(20)]
    array = write(tmp_path / "array.json", json.dumps([{"text": d} for d in docs]).encode())
    assert read(array) == docs
    concatenated = write(tmp_path / "objects.json", jsonl(docs[:3]))
    assert read(concatenated) == docs[:3]


def test_field_and_column_options(tmp_path):
    assert read(write(tmp_path / "a.jsonl", jsonl(DOCS, "body")), text_field="body") == DOCS
    table = pa.table({"id": [1, 2, 3], "body": DOCS})
    pq.write_table(table, tmp_path / "a.parquet")
    assert read(tmp_path / "a.parquet", text_field="body") == DOCS


def test_parquet_streams_row_groups_and_counts_null_rows(tmp_path, monkeypatch):
    monkeypatch.setattr(row_formats, "PARQUET_BATCH_ROWS", 3)
    texts = [f"row {i}" for i in range(500)] + [None]
    pq.write_table(pa.table({"text": texts}), tmp_path / "big.parquet", row_group_size=64)
    stats = ReadStats()
    got = list(read_file(tmp_path / "big.parquet", stats=stats))
    assert got == texts[:-1]
    assert stats.skipped == {"not_text": 1} and stats.documents == 500


def test_txt_blank_lines_with_windows_line_ends(tmp_path):
    path = write(tmp_path / "a.txt", b"one\r\ntwo\r\n\r\n  \r\nthree\r\n")
    assert read(path, blank_line_documents=True) == ["one\ntwo", "three"]


def test_invalid_utf8_is_replaced_and_counted_not_fatal(tmp_path):
    path = write(tmp_path / "a.jsonl", b'{"text": "fine"}\n{"text": "bad \xff byte"}\n')
    stats = ReadStats()
    assert list(read_file(path, stats=stats)) == ["fine", "bad \ufffd byte"]
    assert stats.invalid_utf8_documents == 1 and stats.documents == 2


def test_csv_counts_invalid_utf8_per_record(tmp_path):
    path = write(tmp_path / "a.csv", b'text\n"ok"\n"multi\nline \xfe"\n"ok too"\n')
    stats = ReadStats()
    assert list(read_file(path, stats=stats)) == ["ok", "multi\nline \ufffd", "ok too"]
    assert stats.invalid_utf8_documents == 1


def test_rows_keep_every_field_with_invalid_bytes_replaced(tmp_path):
    path = write(tmp_path / "a.jsonl.gz", b'{"text": "a", "tags": ["x\xff"], "n": 1}\n')
    stats = ReadStats()
    assert list(read_rows(path, stats=stats)) == [Record(1, {"text": "a", "tags": ["x\ufffd"],
                                                         "n": 1})]
    assert (stats.documents, stats.invalid_utf8_bytes) == (1, 1)
    table = write(tmp_path / "a.csv", b"id,text\n1,one\n2,two,extra\n" + b"3,x\n" * 200)
    stats = ReadStats()
    rows = list(read_rows(table, stats=stats))
    assert rows[0] == Record(2, {"id": "1", "text": "one"}) and len(rows) == 201
    assert stats.skipped == {"wrong_width": 1}  # a shifted cell would be the wrong text
    one_line_error("a.csv:3: 3 fields, the header has 2",
                   lambda: list(read_rows(table, ReadOptions(strict=True))))


def test_a_txt_file_read_as_another_format_and_by_lines(tmp_path):
    path = write(tmp_path / "sick.txt.gz", b"text\tlabel\nhi\t1\n")
    assert list(read_rows(path, as_format=".tsv")) == [Record(2, {"text": "hi", "label": "1"})]
    assert list(read_lines(path)) == [(1, "text\tlabel"), (2, "hi\t1")]


# ---------------------------------------------------------------- sources


def test_directories_recurse_in_sorted_order_and_skip_other_files(tmp_path):
    (tmp_path / "b").mkdir()
    write(tmp_path / "b" / "z.txt", b"z")
    write(tmp_path / "a.jsonl.gz", jsonl(["a"]))
    write(tmp_path / "notes.md", b"not a corpus")
    write(tmp_path / "b" / "c.txt.zst", b"c")
    assert [p.name for p in expand_sources([str(tmp_path)])] == ["a.jsonl.gz", "c.txt.zst",
                                                                 "z.txt"]
    assert list(read_sources([str(tmp_path)])) == ["a", "c", "z"]
    assert list(read_sources([str(tmp_path / "b" / "*.txt*")])) == ["c", "z"]


# ---------------------------------------------------------------- bad input


def test_a_missing_path_names_it(tmp_path):
    one_line_error("nowhere.jsonl: no such file", lambda: expand_sources(["nowhere.jsonl"]))
    one_line_error("*.jsonl: no readable file matches",
                   lambda: expand_sources([str(tmp_path / "*.jsonl")]))
    one_line_error("unsupported file type",
                   lambda: expand_sources([str(write(tmp_path / "x.docx", b"x"))]))


def test_a_binary_file_is_refused(tmp_path):
    path = write(tmp_path / "model.txt.gz", b"\x7fELF\x00\x00\x01" * 100)
    one_line_error("model.txt.gz: looks like a binary file", lambda: read(path))


@pytest.mark.parametrize("name,data", [("cut.jsonl.gz", gzip.compress(b"x" * 999)[:-8]),
                                       ("cut.jsonl.zst", b"(\xb5/\xfd garbage")])
def test_a_corrupt_compressed_file_is_one_line(tmp_path, name, data):
    (tmp_path / name).write_bytes(data)
    one_line_error(f"{name}: cannot be read", lambda: read(tmp_path / name))


def test_not_a_parquet_file(tmp_path):
    path = write(tmp_path / "x.parquet", b"PAR1 but not really")
    one_line_error("x.parquet: not a readable Parquet file", lambda: read(path))


def test_a_bad_jsonl_line_is_skipped_and_counted_or_fatal_when_strict(tmp_path):
    lines = [json.dumps({"text": f"doc {i}"}) for i in range(300)]
    lines[41] = "{oops"
    lines[99] = json.dumps({"body": "no text field"})
    path = write(tmp_path / "big.jsonl", "\n".join(lines).encode())
    stats = ReadStats()
    assert len(list(read_file(path, stats=stats))) == 298
    assert stats.skipped == {"not_json": 1, "missing_field": 1}
    one_line_error("big.jsonl:42: not valid JSON", lambda: read(path, strict=True))


# Cells that make writers quote: a quote, the delimiter, a line break, a quote only inside.
QUOTED_CELLS = ['He said "hi"', "a, comma", "a\ttab", "two\nlines", '5" screen', '"whole"']


@pytest.mark.parametrize("delimiter,suffix", [(",", ".csv"), ("\t", ".tsv")])
def test_tables_read_as_the_csv_module_writes_them(tmp_path, delimiter, suffix):
    text = io.StringIO()
    csv.writer(text, delimiter=delimiter, lineterminator="\n").writerows(
        [["id", "text"], *enumerate(QUOTED_CELLS)])
    assert '"""whole"""' in text.getvalue()  # the writer quoted what the reader must unquote
    path = write(tmp_path / ("a" + suffix), text.getvalue().encode())
    assert read(path) == QUOTED_CELLS


def test_tables_read_as_pandas_writes_them(tmp_path):
    # pandas is not installed here: these are the bytes pandas.DataFrame({"text": QUOTED_CELLS,
    # "label": [...]}).to_csv(path, sep="\t") writes (its index first, under an empty name;
    # QUOTE_MINIMAL, quotes doubled).
    written = (b'\ttext\tlabel\n0\t"He said ""hi"""\tpos\n1\ta, comma\tneg\n'
               b'2\t"a\ttab"\tpos\n3\t"two\nlines"\tneg\n4\t"5"" screen"\tpos\n'
               b'5\t"""whole"""\tneg\n')
    rows = list(read_rows(write(tmp_path / "a.tsv.gz", written)))
    assert [row.fields["text"] for row in rows] == QUOTED_CELLS
    assert [row.line for row in rows] == [2, 3, 4, 5, 7, 8]  # a row's first line
    assert rows[0].fields == {"": "0", "text": 'He said "hi"', "label": "pos"}


def test_a_quote_inside_an_unquoted_cell_is_text(tmp_path):
    path = write(tmp_path / "a.tsv", b'id\ttext\n1\t5" screen\n2\tit \'s a "comedy" .\n')
    assert read(path) == ['5" screen', 'it \'s a "comedy" .']


def test_quoting_that_does_not_parse_is_one_bad_record(tmp_path):
    rows = [f"{i}\trow {i}" for i in range(300)]
    rows[41] = '41\t"Hello," she said'  # text after the closing quote
    rows[250] = '250\t"a quote never closed'
    path = write(tmp_path / "a.tsv", ("id\ttext\n" + "\n".join(rows) + "\n").encode())
    stats = ReadStats()
    documents = list(read_file(path, stats=stats))
    assert documents == [f"row {i}" for i in range(300) if i not in (41, 250)]  # the rest read
    assert stats.skipped == {"bad_row": 2}
    one_line_error("a.tsv:43: a cell that opens with a quote is quoted, so it must end at its "
                   'closing quote (a quote inside it is written "")',
                   lambda: read(path, strict=True))
    unclosed = write(tmp_path / "u.csv", b'id,text\n1,"never closed\n2,two\n')
    message = one_line_error("u.csv:2: a quote opened in this row is never closed",
                             lambda: read(unclosed))
    assert "1 of 2 records bad" in message


def test_a_file_of_mostly_bad_records_fails_even_without_strict(tmp_path):
    path = write(tmp_path / "bad.jsonl", b'{"text": "fine"}\n{oops\n')
    message = one_line_error("bad.jsonl:2: not valid JSON", lambda: read(path))
    assert "1 of 2 records bad" in message
    wrong_field = write(tmp_path / "f.jsonl", jsonl(DOCS, "body"))
    one_line_error("f.jsonl:1: no 'text' field (fields: body, id)", lambda: read(wrong_field))


def test_a_json_array_error_names_the_line(tmp_path):
    path = write(tmp_path / "a.json", b'[\n {"text": "a"},\n {"text": "b"},\n {"text": }\n]')
    one_line_error("a.json:4: not valid JSON", lambda: read(path))
    unclosed = write(tmp_path / "u.json", b'[\n {"text": "a"},\n')
    one_line_error("u.json:3: the JSON array is never closed", lambda: read(unclosed))


def test_a_missing_column_names_the_file_and_the_columns(tmp_path):
    path = write(tmp_path / "a.csv.gz", b"id,body\n1,hello\n")
    one_line_error("a.csv.gz:1: no 'text' column (columns: id, body)", lambda: read(path))
    pq.write_table(pa.table({"body": ["x"]}), tmp_path / "a.parquet")
    one_line_error("a.parquet: no 'text' column (columns: body)",
                   lambda: read(tmp_path / "a.parquet"))


def test_an_empty_corpus_is_an_error(tmp_path):
    write(tmp_path / "empty.jsonl", b"\n\n")
    one_line_error("empty.jsonl: the corpus is empty",
                   lambda: list(read_sources([str(tmp_path / "empty.jsonl")])))
