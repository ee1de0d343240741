"""Labelled fine-tuning data: text tables, SQuAD questions and CoNLL tagged words, as task
examples. The files are read through lmlab/data/text/readers.py (any format and compression it
reads).

Labelled sets are small, so each file is read whole and the first problem is fatal, named by
file and line: a bad row in a labelled set means a wrong column or format, and skipping it would
quietly change what the model learns and is scored on. The exception is SQuAD answers that are
not where they say, a known defect of public sets: those questions are skipped and counted
unless `strict`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, islice
from pathlib import Path

from lmlab.data.errors import DataError
from lmlab.data.text.readers import (
    ReadOptions,
    ReadStats,
    Record,
    file_format,
    read_lines,
    read_rows,
)

TEXT_COLUMN_GUESSES = ("text", "sentence", "content", "sentence1", "sentence_A", "premise",
                       "question")
PAIR_COLUMN_GUESSES = ("text_pair", "sentence2", "sentence_B", "hypothesis")
LABEL_COLUMN_GUESSES = ("label", "labels", "gold_label", "score", "relatedness_score")
TABLES = (".tsv", ".csv", ".jsonl", ".parquet")
HEADED = (".tsv", ".csv")  # a missing column is named at the header's line
DOCSTART = "-DOCSTART-"
TAG = re.compile(r"O|[BI]-\S+")
SNIFFED_LINES = 20  # lines read to tell a CoNLL file from plain text
EVERY_PROBLEM = ReadOptions(strict=True)

Field = Mapping[str, object]


@dataclass(frozen=True)
class TextExample:
    text: str
    text_pair: str | None
    label: str | float | None  # a float for regression; None when the file has no labels
    line: int  # 1-based; a CSV row's first line


@dataclass(frozen=True)
class QAExample:
    id: str
    question: str
    context: str
    answers: tuple[tuple[str, int], ...]  # (text, answer_start); empty = unanswerable


@dataclass
class SquadRead:
    examples: list[QAExample]
    skipped: int  # questions dropped because an answer's text is not at its answer_start


@dataclass(frozen=True)
class TaggedSentence:
    words: tuple[str, ...]
    tags: tuple[str, ...]
    line: int  # line of its first word


def _utf8(items: Iterator, stats: ReadStats, path: Path, line) -> Iterator:
    """`items` as read, up to the first that held invalid UTF-8: labelled text is not guessed."""
    for item in items:
        if stats.invalid_utf8_bytes:
            raise DataError("not UTF-8 text (an invalid byte)", path, line(item))
        yield item


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """(number, text) of each line, without its ending."""
    stats = ReadStats()
    return _utf8(read_lines(path, stats), stats, path, lambda item: item[0])


def _first_lines(path: Path, count: int) -> list[str]:
    """Up to `count` of the file's first non-blank lines."""
    return list(islice((line for _, line in _lines(Path(path)) if line.strip()), count))


# ---------------------------------------------------------------- text tables


def _table_format(path: Path) -> str:
    """The table format of `path`: its suffix's, else tab-separated columns."""
    found = file_format(path)
    return found if found in TABLES else ".tsv"


def _rows(path: Path, as_format: str | None = None) -> Iterator[Record]:
    """Every record, the first problem fatal: a JSON object, or a table row keyed by its
    header."""
    stats = ReadStats()
    rows = read_rows(path, EVERY_PROBLEM, stats, as_format=as_format or _table_format(path))
    return _utf8(rows, stats, path, lambda row: row.line)


def is_table(path: str | Path) -> bool:
    """Whether `path` holds a table of examples (.tsv, .csv, .jsonl, .parquet, each maybe
    compressed, or a first line with a tab) rather than plain text, one text a line."""
    if file_format(Path(path)) in TABLES:
        return True
    return any("\t" in line for line in _first_lines(Path(path), 1))


def _column(kind: str, wanted: str | None, guesses: Sequence[str], columns: Sequence[str],
            path: Path, line: int, required: bool = True) -> str | None:
    """The named column, else the first guess present; absent and named or required: an error."""
    found = next((name for name in ([wanted] if wanted else guesses) if name in columns), None)
    if found is None and (required or wanted):
        tried = f"{wanted!r} (" if wanted else f"(tried {', '.join(guesses)}; "
        raise DataError(f"no {kind} column {tried}columns: {', '.join(columns)})", path, line)
    return found


def guess_pair_column(path: str | Path) -> str | None:
    """The first of PAIR_COLUMN_GUESSES in the file, for tasks on sentence pairs."""
    path = Path(path)
    first = next(_rows(path), None)
    columns = [] if first is None else list(first.fields)
    return _column("pair", None, PAIR_COLUMN_GUESSES, columns, path, 1, required=False)


def _cell(row: Field, column: str | None, path: Path, line: int) -> str:
    """A cell as text: '' when missing or null, JSON numbers and booleans as JSON spells them."""
    value = None if column is None else row.get(column)
    if value is None or isinstance(value, str):
        return (value or "").strip()
    if isinstance(value, (bool, int, float)):
        return json.dumps(value)
    raise DataError(f"the {column!r} field is a {type(value).__name__}, not a single value",
                    path, line)


def _number(label: str, path: Path, line: int) -> float:
    try:
        value = float(label)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise DataError(f"label {label!r} is not a number", path, line)
    return value


def _example(row: Field, columns: tuple[str, str | None, str | None], numeric: bool,
             need_label: bool, path: Path, line: int) -> TextExample:
    """One row as an example; text, pair and (when needed) label must not be empty."""
    text_column, pair_column, label_column = columns
    text, pair, label = (_cell(row, name, path, line) for name in columns)
    for name, cell in ((text_column, text), (pair_column, pair)):
        if name is not None and not cell:
            raise DataError(f"no text in {name!r}", path, line)
    if label_column is not None and need_label and not label:
        raise DataError(f"no label in {label_column!r}", path, line)
    target = _number(label, path, line) if numeric and label else label or None
    return TextExample(text, pair or None, target, line)


def read_table(path: str | Path, text_column: str | None = None, pair_column: str | None = None,
               label_column: str | None = None, numeric_label: bool = False,
               where: Mapping[str, str] | None = None,
               need_label: bool = True) -> list[TextExample]:
    """Examples from a CSV, TSV or JSONL file; columns are named or guessed from common names."""
    path, where = Path(path), where or {}
    rows = _rows(path)
    first = next(rows, None)
    if first is None:
        raise DataError("no examples", path)
    names, at = list(first.fields), 1 if _table_format(path) in HEADED else first.line
    columns = (_column("text", text_column, TEXT_COLUMN_GUESSES, names, path, at),
               _column("pair", pair_column, (), names, path, at, required=False),
               _column("label", label_column, LABEL_COLUMN_GUESSES, names, path, at,
                       required=need_label))
    for name in where:
        _column("where", name, (), names, path, at)
    examples = [_example(row, columns, numeric_label, need_label, path, line)
                for line, row in chain([first], rows)
                if all(_cell(row, name, path, line) == value for name, value in where.items())]
    if not examples:
        kept = " and ".join(f"{name} = {value!r}" for name, value in where.items())
        raise DataError("no examples" + (f" with {kept}" if kept else ""), path)
    return examples


# ---------------------------------------------------------------- SQuAD


def is_squad(path: str | Path) -> bool:
    """Whether `path` holds SQuAD JSON (.json, or text opening with '{') rather than plain
    text, one text a line."""
    return file_format(Path(path)) == ".json" or any(
        line.lstrip().startswith("{") for line in _first_lines(Path(path), 1))


def _list(record: object, key: str, path: Path, where: str) -> list:
    if not isinstance(record, dict) or not isinstance(record.get(key), list):
        raise DataError(f"{where}: no {key!r} list", path)
    return record[key]


def _answer(answer: object, name: str, path: Path) -> tuple[str, int]:
    text, start = (answer.get(key) if isinstance(answer, dict) else None
                   for key in ("text", "answer_start"))
    if not (isinstance(text, str) and text and type(start) is int):
        raise DataError(f"{name}: an answer needs a 'text' and an integer 'answer_start'", path)
    return text, start


def _question(record: object, context: str, where: str, path: Path,
              need_answers: bool) -> QAExample:
    qid = record.get("id") if isinstance(record, dict) else None
    if type(qid) not in (str, int):
        raise DataError(f"{where}: a question without an 'id'", path)
    name = f"question {str(qid)!r}"
    question = record.get("question")
    if not isinstance(question, str) or not question.strip():
        raise DataError(f"{name}: no 'question' text", path)
    answers = tuple(_answer(answer, name, path) for answer in record.get("answers") or [])
    if record.get("is_impossible") is True:
        answers = ()  # SQuAD v2 keeps its guesses in 'plausible_answers'
    elif not answers and need_answers:
        raise DataError(f"{name}: no answers, and not marked is_impossible", path)
    return QAExample(str(qid), question, context, answers)


def _misplaced(example: QAExample) -> str | None:
    """Why an answer's text is not at its answer_start, or None when all are."""
    for text, start in example.answers:
        if start < 0 or example.context[start:start + len(text)] != text:
            return (f"question {example.id!r}: answer {text!r} is not at character {start} of "
                    "its context")
    return None


def read_squad(path: str | Path, strict: bool = False, need_answers: bool = True) -> SquadRead:
    """Questions from a SQuAD v1.1 or v2.0 JSON file (any top-level object of it, compressed or
    not); v2's unanswerable ones have no answers."""
    path = Path(path)
    examples, skipped = [], 0
    articles = (article for top in _rows(path, ".json")
                for article in _list(top.fields, "data", path, "not SQuAD: the top level"))
    for a, article in enumerate(articles, 1):
        for p, paragraph in enumerate(_list(article, "paragraphs", path, f"article {a}"), 1):
            where = f"article {a}, paragraph {p}"
            context = paragraph.get("context") if isinstance(paragraph, dict) else None
            if not isinstance(context, str) or not context.strip():
                raise DataError(f"{where}: no 'context'", path)
            for q, record in enumerate(_list(paragraph, "qas", path, where), 1):
                example = _question(record, context, f"{where}, question {q}", path,
                                    need_answers)
                problem = _misplaced(example)
                if problem is None:
                    examples.append(example)
                elif strict:
                    raise DataError(problem, path)
                else:
                    skipped += 1
    if not examples:
        raise DataError("no questions" + (f" ({skipped} skipped: an answer not at its "
                                          "answer_start)" if skipped else ""), path)
    return SquadRead(examples, skipped)


# ---------------------------------------------------------------- CoNLL


def is_conll(path: str | Path) -> bool:
    """Whether `path` holds CoNLL columns (each of its first lines a word and a tag, or a
    -DOCSTART-) rather than plain text, one text a line."""
    lines = _first_lines(Path(path), SNIFFED_LINES)
    return bool(lines) and all(
        fields[0] == DOCSTART or (len(fields) >= 2 and TAG.fullmatch(fields[-1]))
        for fields in (line.split() for line in lines))


def _positions(width: int, word_column: int, tag_column: int, path: Path,
               line: int) -> tuple[int, int]:
    """The word and tag columns as indices into `width` fields; they must exist and differ."""
    word, tag = (c + width if c < 0 else c for c in (word_column, tag_column))
    if not (0 <= word < width and 0 <= tag < width) or word == tag:
        raise DataError(f"{width} columns: too few for word column {word_column} and tag "
                        f"column {tag_column}", path, line)
    return word, tag


def read_conll(path: str | Path, word_column: int = 0,
               tag_column: int = -1) -> list[TaggedSentence]:
    """Sentences from a CoNLL file: a word per line, tab (or space) columns, blank lines between."""
    path = Path(path)
    sentences: list[TaggedSentence] = []
    words: list[str] = []
    tags: list[str] = []
    width = first = word = tag = start = 0
    for number, line in chain(_lines(path), [(0, "")]):  # a blank line ends the last sentence
        fields = [f.strip() for f in line.split("\t")] if "\t" in line else line.split()
        if not any(fields) or fields[0] == DOCSTART:
            if words:
                sentences.append(TaggedSentence(tuple(words), tuple(tags), start))
                words, tags = [], []
            continue
        if not width:
            width, first = len(fields), number
            word, tag = _positions(width, word_column, tag_column, path, number)
        if len(fields) != width:
            raise DataError(f"{len(fields)} columns, expected {width} like line {first}", path,
                            number)
        if not fields[word]:
            raise DataError("empty word", path, number)
        if not TAG.fullmatch(fields[tag]):
            raise DataError(f"tag {fields[tag]!r} is not O, B-TYPE or I-TYPE", path, number)
        start = start if words else number
        words.append(fields[word])
        tags.append(fields[tag])
    if not sentences:
        raise DataError("no sentences", path)
    return sentences
