"""Reading labelled fine-tuning data: text tables, SQuAD questions and CoNLL tagged words.

Labelled sets are small, so each file is read whole and the first problem is fatal, named by
file and line: a bad row in a labelled set means a wrong column or format, and skipping it would
quietly change what the model learns and is scored on. The exception is SQuAD answers that are
not where they say, a known defect of public sets: those questions are skipped and counted
unless `strict`.
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, islice
from pathlib import Path

from lmlab.data.errors import DataError
from lmlab.data.readers import UNCLOSED_QUOTE, quote_never_closed

TEXT_COLUMN_GUESSES = ("text", "sentence", "content", "sentence1", "sentence_A", "premise",
                       "question")
PAIR_COLUMN_GUESSES = ("text_pair", "sentence2", "sentence_B", "hypothesis")
LABEL_COLUMN_GUESSES = ("label", "labels", "gold_label", "score", "relatedness_score")
DOCSTART = "-DOCSTART-"
INTEGER = re.compile(r"-?\d+")
TAG = re.compile(r"O|[BI]-\S+")
SNIFFED_LINES = 20  # lines read to tell a CoNLL file from plain text

Row = Mapping[str, object]


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


def _lines(path: Path) -> Iterator[str]:
    """The file's lines with their endings (csv needs them); unreadable files are DataErrors."""
    try:
        with open(path, encoding="utf-8-sig", newline="") as stream:
            yield from stream
    except UnicodeDecodeError as error:
        raise DataError(f"not UTF-8 text ({error.reason})", path) from None
    except OSError as error:
        raise DataError(f"cannot be read ({error.strerror or error})", path) from None


def _first_lines(path: Path, count: int) -> list[str]:
    """Up to `count` of the file's first non-blank lines, without their endings."""
    lines = (line.rstrip("\r\n") for line in _lines(Path(path)) if line.strip())
    return list(islice(lines, count))


# ---------------------------------------------------------------- text tables


def _jsonl_rows(path: Path) -> Iterator[tuple[int, Row]]:
    for number, line in enumerate(_lines(path), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise DataError(f"not valid JSON ({error.msg})", path, number) from None
        if not isinstance(record, dict):
            raise DataError(f"expected a JSON object, got {type(record).__name__}", path, number)
        yield number, record


def _delimited_rows(path: Path) -> Iterator[tuple[int, Row]]:
    # TSV has no quoting: SST-2 sentences hold bare '"' characters that are text.
    tsv = path.suffix.lower() != ".csv"
    last_line = [""]  # the line the latest row ends on

    def lines() -> Iterator[str]:
        for last_line[0] in _lines(path):
            yield last_line[0]

    reader = csv.reader(lines(), delimiter="\t" if tsv else ",",
                        quoting=csv.QUOTE_NONE if tsv else csv.QUOTE_MINIMAL)
    header: list[str] | None = None
    while True:
        line = reader.line_num + 1
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as error:
            raise DataError(f"cannot parse the row ({error})", path, line) from None
        if not tsv and quote_never_closed(line, reader.line_num, last_line[0]):
            raise DataError(UNCLOSED_QUOTE, path, line)
        if header is None:
            header = [name.strip() for name in row]
        elif any(cell.strip() for cell in row):
            if len(row) != len(header):
                raise DataError(f"{len(row)} fields, the header has {len(header)}", path, line)
            yield line, dict(zip(header, row, strict=True))


def _rows(path: Path) -> Iterator[tuple[int, Row]]:
    """(line, row) for each record: a JSON object, or a CSV/TSV row keyed by the header."""
    return _jsonl_rows(path) if path.suffix.lower() == ".jsonl" else _delimited_rows(path)


def is_table(path: str | Path) -> bool:
    """Whether `path` holds a table of examples (.tsv, .csv, .jsonl, or a first line with a tab)
    rather than plain text, one text a line."""
    if Path(path).suffix.lower() in (".tsv", ".csv", ".jsonl"):
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
    columns = [] if first is None else list(first[1])
    return _column("pair", None, PAIR_COLUMN_GUESSES, columns, path, 1, required=False)


def _cell(row: Row, column: str | None, path: Path, line: int) -> str:
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


def _example(row: Row, columns: tuple[str, str | None, str | None], numeric: bool,
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
    names, at = list(first[1]), first[0] if path.suffix.lower() == ".jsonl" else 1
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
    return Path(path).suffix.lower() == ".json" or any(
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
    """Questions from a SQuAD v1.1 or v2.0 JSON file; v2's unanswerable ones have no answers."""
    path = Path(path)
    try:
        top = json.loads("".join(_lines(path)))
    except json.JSONDecodeError as error:
        raise DataError(f"not valid JSON ({error.msg})", path, error.lineno) from None
    examples, skipped = [], 0
    for a, article in enumerate(_list(top, "data", path, "not SQuAD: the top level"), 1):
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
    width = first = word = tag = 0
    for number, line in enumerate(chain(_lines(path), [""]), 1):  # "": end the last sentence
        fields = [f.strip() for f in line.split("\t")] if "\t" in line else line.split()
        if not any(fields) or fields[0] == DOCSTART:
            if words:
                sentences.append(TaggedSentence(tuple(words), tuple(tags), number - len(words)))
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
        words.append(fields[word])
        tags.append(fields[tag])
    if not sentences:
        raise DataError("no sentences", path)
    return sentences


# ---------------------------------------------------------------- labels seen in training


def label_names(labels: Iterable[str]) -> list[str]:
    """Unique labels in a stable natural order: numerically when all are integers ("2" < "10")."""
    names = set(labels)
    if all(INTEGER.fullmatch(name) for name in names):
        return sorted(names, key=lambda name: (int(name), name))
    return sorted(names)


def class_names(examples: Sequence[TextExample], path: str | Path,
                where: str | None = None) -> list[str]:
    """The labels of a classification's training examples. One label alone is refused: the
    model would learn to always answer it and score a perfect accuracy on data like it."""
    names = label_names(example.label for example in examples)
    if len(names) == 1:
        rows = f"all {len(examples)} training rows" + (f" with {where}" if where else "")
        raise DataError(f"{rows} have the label {names[0]!r}; a classifier needs at least two "
                        "labels (is --label-column the right column?)", path)
    return names


SHOWN_LABELS = 12  # training labels an error lists; more mean a wrong column, not a typo


def _check_known(found: Iterable[tuple[str, int]], known: Sequence[str], kind: str,
                 path: str | Path) -> None:
    """Fail at the first value training never saw: the model has no output for it."""
    allowed = set(known)
    shown = ", ".join(known[:SHOWN_LABELS]) + (
        f" … ({len(known)} in all: is --label-column the right column?)"
        if len(known) > SHOWN_LABELS else "")
    for value, line in found:
        if value not in allowed:
            raise DataError(f"{kind} {value!r} never seen in training (training {kind}s: "
                            f"{shown})", path, line)


def check_labels_known(examples: Sequence[TextExample], known: Sequence[str],
                       path: str | Path) -> None:
    """Evaluation labels must be training labels (regression and unlabelled rows pass)."""
    labels = ((e.label, e.line) for e in examples if isinstance(e.label, str))
    _check_known(labels, known, "label", path)


def check_tags_known(sentences: Sequence[TaggedSentence], known: Sequence[str],
                     path: str | Path) -> None:
    """Evaluation tags must be training tags; the error names the tag's own line."""
    tags = ((tag, s.line + i) for s in sentences for i, tag in enumerate(s.tags))
    _check_known(tags, known, "tag", path)
