"""Readers for labelled fine-tuning data: tables, SQuAD, CoNLL, and their one-line errors."""

import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lmlab.data.errors import DataError
from lmlab.tasks.labels import check_labels_known, check_tags_known, label_names
from lmlab.tasks.readers import (
    QAExample,
    TaggedSentence,
    TextExample,
    guess_pair_column,
    is_squad,
    is_table,
    read_conll,
    read_squad,
    read_table,
)


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def fails(call, *words):
    """The call raises one one-line DataError containing every word; returns its message."""
    with pytest.raises(DataError) as caught:
        call()
    message = str(caught.value)
    assert "\n" not in message
    for word in words:
        assert word in message, (word, message)
    return message


# ---------------------------------------------------------------- tables


def test_tsv_guessed_columns_keep_quotes_inside_cells(tmp_path):
    path = write(tmp_path, "dev.tsv", 'label\tcontent\n0\tit \'s a "comedy" .\n1\t5" screen\n')
    assert read_table(path) == [TextExample('it \'s a "comedy" .', None, "0", 2),
                                TextExample('5" screen', None, "1", 3)]


def test_tsv_quoted_as_pandas_writes_it(tmp_path):
    # pandas is not installed here: the bytes of pandas.DataFrame(...).to_csv(path, sep="\t")
    path = write(tmp_path, "train.tsv", '\ttext\tlabel\n0\t"a ""great"" film"\tpos\n'
                                        '1\t"two\nlines"\tneg\n2\tplain\tpos\n')
    assert read_table(path) == [TextExample('a "great" film', None, "pos", 2),
                                TextExample("two\nlines", None, "neg", 3),
                                TextExample("plain", None, "pos", 5)]
    unclosed = write(tmp_path, "bad.tsv", 'text\tlabel\n" odd\tpos\nfine\tneg\n')
    fails(lambda: read_table(unclosed), "bad.tsv:2: a quote opened in this row is never closed")


def test_txt_is_tab_separated_and_blank_lines_are_skipped(tmp_path):
    path = write(tmp_path, "data.txt", "sentence\tlabels\n\nhi\tpos\n\nyo\tneg\n")
    assert [(e.text, e.label, e.line) for e in read_table(path)] == [("hi", "pos", 3),
                                                                     ("yo", "neg", 5)]


def test_csv_named_columns_and_multiline_cell(tmp_path):
    path = write(tmp_path, "d.csv", 'id,a,b,y\n1,"first, line\nsecond",other,yes\n2,x,y,no\n')
    examples = read_table(path, text_column="a", pair_column="b", label_column="y")
    assert examples == [TextExample("first, line\nsecond", "other", "yes", 2),
                        TextExample("x", "y", "no", 4)]


def test_jsonl_fields_and_non_string_labels(tmp_path):
    lines = [{"premise": "p", "hypothesis": "h", "label": 1}, {},
             {"premise": "q", "hypothesis": "k", "label": True}]
    path = write(tmp_path, "d.jsonl", "\n".join(json.dumps(r) if r else "" for r in lines))
    assert guess_pair_column(path) == "hypothesis"
    assert read_table(path, pair_column="hypothesis") == [TextExample("p", "h", "1", 1),
                                                          TextExample("q", "k", "true", 3)]


def test_guess_pair_column(tmp_path):
    sick = write(tmp_path, "SICK.txt", "pair_ID\tsentence_A\tsentence_B\tscore\n1\ta\tb\t4\n")
    assert guess_pair_column(sick) == "sentence_B"
    assert guess_pair_column(write(tmp_path, "one.tsv", "text\tlabel\nx\t1\n")) is None


def test_where_filter_and_numeric_labels(tmp_path):
    path = write(tmp_path, "SICK.txt",
                 "sentence_A\tsentence_B\trelatedness_score\tSemEval_set\n"
                 "a\tb\t4.5\tTRAIN\nc\td\t1\tTEST\ne\tf\t3.25\tTRAIN\n")
    examples = read_table(path, pair_column="sentence_B", numeric_label=True,
                          where={"SemEval_set": "TRAIN"})
    assert examples == [TextExample("a", "b", 4.5, 2), TextExample("e", "f", 3.25, 4)]
    fails(lambda: read_table(path, where={"SemEval_set": "TRIAL"}),
          "SICK.txt:", "no examples", "SemEval_set", "TRIAL")
    fails(lambda: read_table(path, where={"split": "TRAIN"}),
          "SICK.txt:1:", "no where column 'split'", "SemEval_set")


def test_label_not_a_number(tmp_path):
    path = write(tmp_path, "r.tsv", "text\tscore\na\t1.5\nb\tabc\n")
    fails(lambda: read_table(path, numeric_label=True), "r.tsv:3:", "label 'abc' is not a number")


def test_no_label_column_for_prediction(tmp_path):
    path = write(tmp_path, "test.tsv", "id\tsentence\n7\thello\n")
    assert read_table(path, need_label=False) == [TextExample("hello", None, None, 2)]
    fails(lambda: read_table(path), "test.tsv:1:", "no label column", "tried label",
          "columns: id, sentence")


def test_missing_columns(tmp_path):
    path = write(tmp_path, "data.tsv", "label\tcontent\n1\tx\n")
    fails(lambda: read_table(path, label_column="lbl"),
          "data.tsv:1: no label column 'lbl' (columns: label, content)")
    fails(lambda: read_table(path, text_column="txt"), "data.tsv:1:", "no text column 'txt'")
    fails(lambda: read_table(path, pair_column="sentence2"), "data.tsv:1:",
          "no pair column 'sentence2'")
    other = write(tmp_path, "other.tsv", "a\tlabel\n1\tx\n")
    fails(lambda: read_table(other), "other.tsv:1:", "no text column", "columns: a, label")
    jsonl = write(tmp_path, "d.jsonl", '\n{"text": "x"}\n')
    fails(lambda: read_table(jsonl), "d.jsonl:2:", "no label column", "columns: text")


def test_empty_text_or_label(tmp_path):
    path = write(tmp_path, "d.tsv", "text\tlabel\na\t1\n \t0\n")
    fails(lambda: read_table(path), "d.tsv:3:", "no text in 'text'")
    path = write(tmp_path, "e.tsv", "text\tlabel\na\t1\nb\t \n")
    fails(lambda: read_table(path), "e.tsv:3:", "no label in 'label'")
    assert read_table(path, need_label=False)[1] == TextExample("b", None, None, 3)
    pairs = write(tmp_path, "p.jsonl", '{"text": "a", "text_pair": "b", "label": 0}\n'
                  '{"text": "a", "label": 0}\n')
    fails(lambda: read_table(pairs, pair_column="text_pair"), "p.jsonl:2:", "no text in")


def test_row_with_wrong_field_count(tmp_path):
    path = write(tmp_path, "short.tsv", "label\tcontent\n0\tfine\n1 no tab here\n")
    fails(lambda: read_table(path), "short.tsv:3:", "1 fields, the header has 2")


def test_bad_jsonl_lines(tmp_path):
    listed = write(tmp_path, "l.jsonl", '{"text": "a", "label": 0}\n[1, 2]\n')
    fails(lambda: read_table(listed), "l.jsonl:2:", "expected a JSON object, got list")
    broken = write(tmp_path, "b.jsonl", '{"text": "a", "label": 0}\n{"text": \n')
    fails(lambda: read_table(broken), "b.jsonl:2:", "not valid JSON")
    nested = write(tmp_path, "n.jsonl", '{"text": ["a"], "label": 0}\n')
    fails(lambda: read_table(nested), "n.jsonl:1:", "'text'", "list")


def test_compressed_and_parquet_tables_read_like_plain_ones(tmp_path):
    rows = [{"text": "good", "label": "pos"}, {"text": "bad", "label": "neg"}]
    expected = [TextExample("good", None, "pos", 1), TextExample("bad", None, "neg", 2)]
    packed = tmp_path / "train.jsonl.gz"
    packed.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in rows).encode()))
    assert is_table(packed) and read_table(packed) == expected
    columns = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_pylist(rows), columns)
    assert is_table(columns) and read_table(columns) == expected
    fails(lambda: read_table(columns, label_column="y"), "train.parquet:", "no label column 'y'")


def test_invalid_utf8_in_a_labelled_set_is_fatal_at_its_line(tmp_path):
    path = tmp_path / "latin1.tsv"
    path.write_bytes("text\tlabel\ncafe\t1\ncaf\u00e9\t0\n".encode("latin-1"))
    fails(lambda: read_table(path), "latin1.tsv:3:", "not UTF-8")
    conll = tmp_path / "latin1.conll"
    conll.write_bytes("a\tO\n\nr\u00e9sum\u00e9\tO\n".encode("latin-1"))
    fails(lambda: read_conll(conll), "latin1.conll:3:", "not UTF-8")


def test_empty_files(tmp_path):
    fails(lambda: read_table(write(tmp_path, "empty.tsv", "")), "empty.tsv:", "no examples")
    fails(lambda: read_table(write(tmp_path, "head.csv", "text,label\n")), "head.csv:",
          "no examples")
    fails(lambda: read_table(write(tmp_path, "blank.jsonl", "\n\n")), "no examples")
    fails(lambda: read_table(tmp_path / "absent.tsv"), "absent.tsv:", "cannot be read")


# ---------------------------------------------------------------- SQuAD

CONTEXT = "The Panthers defense gave up just 308 points."


def squad(tmp_path, qas, name="squad.json"):
    data = {"version": "1.1", "data": [{"title": "T", "paragraphs": [
        {"context": CONTEXT, "qas": qas}]}]}
    return write(tmp_path, name, json.dumps(data))


def question(qid, text="308", start=34, **extra):
    return {"id": qid, "question": "How many?", "answers": [{"text": text,
                                                            "answer_start": start}], **extra}


def test_squad_v1(tmp_path):
    read = read_squad(squad(tmp_path, [question("q1"), question("q2", "Panthers", 4)]))
    assert read.skipped == 0
    assert read.examples == [QAExample("q1", "How many?", CONTEXT, (("308", 34),)),
                             QAExample("q2", "How many?", CONTEXT, (("Panthers", 4),))]


def test_squad_v2_impossible_question(tmp_path):
    impossible = {"id": "q9", "question": "Who?", "answers": [], "is_impossible": True,
                  "plausible_answers": [{"text": "x", "answer_start": 0}]}
    read = read_squad(squad(tmp_path, [question("q1"), impossible]))
    assert read.examples[1] == QAExample("q9", "Who?", CONTEXT, ())


def test_squad_misplaced_answer_skipped_or_strict(tmp_path):
    path = squad(tmp_path, [question("q1"), question("abc", "x", 12)])
    read = read_squad(path)
    assert [e.id for e in read.examples] == ["q1"] and read.skipped == 1
    fails(lambda: read_squad(path, strict=True), "squad.json:",
          "question 'abc': answer 'x' is not at character 12 of its context")
    only_bad = squad(tmp_path, [question("abc", "x", 12)], "bad.json")
    fails(lambda: read_squad(only_bad), "bad.json:", "no questions", "1 skipped")


def test_squad_unanswered_question(tmp_path):
    path = squad(tmp_path, [{"id": "q1", "question": "Why?", "answers": []}])
    fails(lambda: read_squad(path), "squad.json:", "question 'q1'", "no answers",
          "is_impossible")
    assert read_squad(path, need_answers=False).examples[0].answers == ()


def test_squad_compressed(tmp_path):
    plain = squad(tmp_path, [question("q1")])
    packed = tmp_path / "squad.json.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert is_squad(packed) and read_squad(packed) == read_squad(plain)


def test_squad_malformed(tmp_path):
    broken = write(tmp_path, "broken.json", '{"data": [\n{"title": }')
    fails(lambda: read_squad(broken), "broken.json:2:", "not valid JSON")
    fails(lambda: read_squad(write(tmp_path, "x.json", '{"version": 1}')), "x.json:",
          "'data'")
    no_id = squad(tmp_path, [{"question": "Who?", "answers": []}], "noid.json")
    fails(lambda: read_squad(no_id), "noid.json:", "article 1, paragraph 1, question 1",
          "'id'")
    no_text = squad(tmp_path, [{"id": "q7", "answers": []}], "noq.json")
    fails(lambda: read_squad(no_text), "noq.json:", "question 'q7'", "'question'")
    no_context = write(tmp_path, "noc.json", json.dumps(
        {"data": [{"paragraphs": [{"qas": [question("q1")]}]}]}))
    fails(lambda: read_squad(no_context), "noc.json:", "article 1, paragraph 1", "'context'")
    bad_answer = squad(tmp_path, [question("q3", start="34")], "ans.json")
    fails(lambda: read_squad(bad_answer), "ans.json:", "question 'q3'", "answer_start")
    fails(lambda: read_squad(squad(tmp_path, [], "none.json")), "none.json:", "no questions")


# ---------------------------------------------------------------- CoNLL


def test_conll_with_docstart(tmp_path):
    path = write(tmp_path, "train.conll", "-DOCSTART-\tO\n\nEmpire\tB-location\n"
                 "State\tI-location\n.\tO\n\t\n\nhi\tO\n")
    assert read_conll(path) == [
        TaggedSentence(("Empire", "State", "."), ("B-location", "I-location", "O"), 3),
        TaggedSentence(("hi",), ("O",), 8)]


def test_conll_whitespace_columns_and_chosen_columns(tmp_path):
    path = write(tmp_path, "eng.train", "-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\n"
                 "rejects VBZ B-VP O\n\nPeter NNP B-NP B-PER\n")
    sentences = read_conll(path)
    assert [s.words for s in sentences] == [("EU", "rejects"), ("Peter",)]
    assert [s.tags for s in sentences] == [("B-ORG", "O"), ("B-PER",)]
    chunks = read_conll(path, word_column=0, tag_column=2)
    assert chunks[0].tags == ("B-NP", "B-VP")


def test_conll_wrong_column_count(tmp_path):
    path = write(tmp_path, "d.conll", "a\tO\nb\tO\tX\n")
    fails(lambda: read_conll(path), "d.conll:2:", "3 columns, expected 2 like line 1")
    one = write(tmp_path, "one.conll", "a\nb\n")
    fails(lambda: read_conll(one), "one.conll:1:", "1 columns", "too few")
    fails(lambda: read_conll(write(tmp_path, "two.conll", "a\tO\n"), tag_column=3),
          "two.conll:1:", "too few")


def test_conll_bad_tag(tmp_path):
    path = write(tmp_path, "d.conll", "a\tO\n\nb\tB-PER\nc\tE-PER\n")
    fails(lambda: read_conll(path), "d.conll:4:", "tag 'E-PER'")


def test_conll_empty(tmp_path):
    fails(lambda: read_conll(write(tmp_path, "e.conll", "")), "e.conll:", "no sentences")
    fails(lambda: read_conll(write(tmp_path, "b.conll", "\n\t\n\n")), "no sentences")


# ---------------------------------------------------------------- known labels


def test_label_names_order():
    assert label_names(["10", "2", "2", "-1", "0"]) == ["-1", "0", "2", "10"]
    assert label_names(["neutral", "entailment", "contradiction", "neutral"]) == [
        "contradiction", "entailment", "neutral"]
    assert label_names(["10", "2", "x"]) == ["10", "2", "x"]
    assert label_names([]) == []


def test_check_labels_known(tmp_path):
    examples = [TextExample("a", None, "a", 2), TextExample("b", None, "x", 3)]
    check_labels_known(examples[:1], ["a", "b", "c"], "dev.tsv")
    check_labels_known([TextExample("a", None, 2.5, 2), TextExample("b", None, None, 3)],
                       ["a"], "dev.tsv")
    fails(lambda: check_labels_known(examples, ["a", "b", "c"], "dev.tsv"),
          "dev.tsv:3: label 'x' never seen in training (training labels: a, b, c)")


def test_check_tags_known():
    sentences = [TaggedSentence(("a", "b"), ("O", "B-PER"), 5)]
    check_tags_known(sentences, ["O", "B-PER"], "dev.conll")
    fails(lambda: check_tags_known(sentences, ["O", "B-LOC"], "dev.conll"),
          "dev.conll:6:", "tag 'B-PER' never seen in training", "O, B-LOC")
