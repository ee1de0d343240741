"""Extractive QA windows, answer labels and post-processing, on hand-built ids, offsets and
logits, and end to end on small tokenizers trained here."""

import math

import numpy as np
import pytest
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

from lmlab.finetune.qa_spans import (
    Answer,
    QAWindow,
    QuestionTooLong,
    best_answer,
    label_window,
    make_windows,
)

CLS, SEP = 1, 2
QUESTION = [10, 11, 12]
HEAD = len(QUESTION) + 2  # [CLS] question [SEP]: the first context token's index in a window

# "The quick brown fox jumps" with byte-level BPE offsets: a word's token includes its space.
SENTENCE = "The quick brown fox jumps"
SENTENCE_OFFSETS = [(0, 3), (3, 9), (9, 15), (15, 19), (19, 25)]


def words(n: int) -> tuple[str, list[int], list[tuple[int, int]]]:
    """A context of n words "w00 w01 ...": its text, ids (100 + i) and offsets."""
    return (" ".join(f"w{i:02d}" for i in range(n)), [100 + i for i in range(n)],
            [(4 * i, 4 * i + 3) for i in range(n)])


def word_windows(n: int = 20, max_len: int = 12, stride: int | None = 2) -> list[QAWindow]:
    _, ids, offsets = words(n)
    return make_windows(7, QUESTION, ids, offsets, CLS, SEP, max_len, stride)


def sentence_window() -> QAWindow:
    (window,) = make_windows(0, QUESTION, [50, 51, 52, 53, 54], SENTENCE_OFFSETS, CLS, SEP,
                             max_len=20, stride=0)
    return window


def logits(window: QAWindow, peaks: dict[int, float], base: float = 0.0) -> np.ndarray:
    values = np.full(len(window.input_ids), base)
    values[list(peaks)] = list(peaks.values())
    return values


def context_range(window: QAWindow) -> tuple[int, int]:
    """The first and last context token (by word number) the window holds."""
    return window.input_ids[HEAD] - 100, window.input_ids[-2] - 100


def test_windows_step_by_room_less_stride_and_the_last_ends_at_the_context_end():
    # room = max_len 12 - question 3 - [CLS], [SEP], [SEP] = 6 context tokens a window. Windows
    # step by room - stride = 4, so neighbours share `stride` tokens (HF's doc_stride). HF's
    # tokenizer overflow would leave a short last window (16-19); we move it back to end at the
    # context's end (14-19) so that every window is full.
    windows = word_windows()
    assert [context_range(w) for w in windows] == [(0, 5), (4, 9), (8, 13), (12, 17), (14, 19)]
    held = {w.input_ids[i] - 100 for w in windows for i in range(HEAD, len(w.input_ids) - 1)}
    assert held == set(range(20))
    for window in windows:
        assert window.example == 7 and len(window.input_ids) <= 12
        assert window.input_ids[:HEAD] == [CLS, *QUESTION, SEP] and window.input_ids[-1] == SEP


def test_the_default_stride_is_128_or_half_a_small_window():
    # room 6 → windows share 3 tokens and step by 3; room 300 → they share 128.
    assert [context_range(w) for w in word_windows(n=12, stride=None)] == [
        (0, 5), (3, 8), (6, 11)]
    _, ids, offsets = words(500)
    windows = make_windows(0, QUESTION, ids, offsets, CLS, SEP, max_len=306, stride=None)
    assert windows[1].input_ids[HEAD] - 100 == 300 - 128


def test_window_layout_ids_token_types_and_offsets():
    window = word_windows()[1]  # context tokens 4-9
    assert window.input_ids == [CLS, *QUESTION, SEP, *range(104, 110), SEP]
    assert window.token_type_ids == [0] * 5 + [1] * 7
    assert window.offsets == [None] * 5 + [(4 * i, 4 * i + 3) for i in range(4, 10)] + [None]
    assert (window.start, window.end) == (0, 0)


def test_short_context_makes_one_window_and_empty_context_one_without_context():
    assert [context_range(w) for w in word_windows(n=4)] == [(0, 3)]
    (empty,) = make_windows(0, QUESTION, [], [], CLS, SEP, max_len=12, stride=2)
    assert empty.input_ids == [CLS, *QUESTION, SEP, SEP]
    assert empty.token_type_ids == [0] * 5 + [1]
    assert empty.offsets == [None] * 6


def test_no_overlap_and_the_largest_stride():
    assert [context_range(w) for w in word_windows(n=12, stride=0)] == [(0, 5), (6, 11)]
    assert [context_range(w) for w in word_windows(n=8, stride=5)] == [(0, 5), (1, 6), (2, 7)]


def test_a_question_leaving_no_room_for_context_is_too_long():
    _, ids, offsets = words(5)
    with pytest.raises(QuestionTooLong, match=r"9 tokens.*max_len 12"):
        make_windows(0, list(range(10, 19)), ids, offsets, CLS, SEP, max_len=12, stride=0)
    (window,) = make_windows(0, list(range(10, 18)), ids[:1], offsets[:1], CLS, SEP, 12, 0)
    assert len(window.input_ids) == 12


def test_stride_must_be_below_the_room():
    with pytest.raises(ValueError, match=r"6 context tokens.*got 6"):
        word_windows(stride=6)
    with pytest.raises(ValueError, match="got -1"):
        word_windows(stride=-1)


def test_label_an_answer_inside_a_window():
    window = word_windows()[0]
    labelled = label_window(window, 8, 15)  # "w02 w03"
    assert (labelled.start, labelled.end) == (HEAD + 2, HEAD + 3)
    assert (window.start, window.end) == (0, 0)  # a new window; the given one is untouched


def test_an_answer_crossing_a_window_boundary_is_null_where_cut_and_labelled_where_whole():
    labels = [label_window(w, 20, 27) for w in word_windows()]  # "w05 w06": tokens 5 and 6
    assert [(w.start, w.end) for w in labels] == [(0, 0), (HEAD + 1, HEAD + 2), (0, 0),
                                                 (0, 0), (0, 0)]


def test_label_with_byte_level_offsets_that_include_the_leading_space():
    window = sentence_window()
    for answer, tokens in [("brown fox", (7, 8)), ("The", (5, 5)), ("quick", (6, 6)),
                           ("jumps", (9, 9)), ("quick brown fox jumps", (6, 9))]:
        start = SENTENCE.index(answer)
        labelled = label_window(window, start, start + len(answer))
        assert (labelled.start, labelled.end) == tokens, answer


def test_label_takes_the_tokens_holding_the_first_and_last_characters():
    # "a foxes." as "a", "Ġfox", "es", ".": an answer may start or end inside a word
    (window,) = make_windows(0, QUESTION, [60, 61, 62, 63], [(0, 1), (1, 5), (5, 7), (7, 8)],
                             CLS, SEP, max_len=20, stride=0)
    for (start, end), tokens in [((2, 7), (6, 7)), ((2, 5), (6, 6)), ((5, 8), (7, 8)),
                                 ((1, 5), (6, 6)), ((7, 8), (8, 8)), ((5, 5), (0, 0))]:
        labelled = label_window(window, start, end)
        assert (labelled.start, labelled.end) == tokens, (start, end)


def test_label_with_a_trained_byte_level_bpe():
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.train_from_iterator(
        ["The quick brown fox jumps over the lazy dog.", "A lazy dog sleeps all day."],
        trainers.BpeTrainer(vocab_size=300, special_tokens=["[CLS]", "[SEP]"],
                            initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    context = "The quick brown fox jumps over the lazy dog."
    encoded = tokenizer.encode(context, add_special_tokens=False)
    question = tokenizer.encode("Who sleeps?", add_special_tokens=False).ids
    (window,) = make_windows(0, question, encoded.ids, encoded.offsets,
                             tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]"),
                             max_len=64, stride=0)
    start = context.index("lazy dog")
    labelled = label_window(window, start, start + len("lazy dog"))
    first, last = window.offsets[labelled.start], window.offsets[labelled.end]
    assert context[first[0]:last[1]] == " lazy dog"  # the first token holds the leading space
    answer = best_answer([labelled], [logits(window, {labelled.start: 9.0})],
                         [logits(window, {labelled.end: 9.0})], context)
    assert (answer.text, context[answer.start:answer.end]) == ("lazy dog", "lazy dog")


def test_best_answer_picks_the_span_with_exact_characters():
    window = sentence_window()
    answer = best_answer([window], [logits(window, {7: 5.0})], [logits(window, {8: 5.0})],
                         SENTENCE)
    assert (answer.text, answer.start, answer.end) == ("brown fox", 10, 19)
    assert SENTENCE[answer.start:answer.end] == answer.text
    assert 0.0 < answer.score <= 1.0


def test_a_span_crossing_a_window_boundary_is_found_in_the_window_holding_it_whole():
    context, _, _ = words(20)
    windows = word_windows()
    starts = [logits(w, {}) for w in windows]
    ends = [logits(w, {}) for w in windows]
    starts[0][HEAD + 5], ends[0][HEAD + 5] = 3.0, 3.0  # window 0 holds token 5 but not 6
    starts[1][HEAD + 1], ends[1][HEAD + 2] = 4.0, 4.0  # window 1 holds tokens 5 and 6
    answer = best_answer(windows, starts, ends, context)
    assert (answer.text, answer.start, answer.end) == ("w05 w06", 20, 27)


def test_max_answer_len_drops_a_longer_higher_scoring_span():
    window = sentence_window()
    starts, ends = [logits(window, {5: 5.0})], [logits(window, {9: 5.0, 6: 3.0})]
    assert best_answer([window], starts, ends, SENTENCE).text == SENTENCE
    answer = best_answer([window], starts, ends, SENTENCE, max_answer_len=2)
    assert (answer.text, answer.start, answer.end) == ("The quick", 0, 9)


def test_an_end_before_its_start_is_dropped():
    window = sentence_window()
    starts, ends = [logits(window, {8: 5.0})], [logits(window, {6: 5.0, 9: 3.0})]
    assert best_answer([window], starts, ends, SENTENCE).text == "fox jumps"
    # only the n_best highest starts and ends are paired: with one each, no valid span is left
    assert best_answer([window], starts, ends, SENTENCE, n_best=1) == Answer("", 0.0, 0, 0)


def test_v2_null_answer_only_when_it_beats_the_best_span_by_more_than_the_threshold():
    window = sentence_window()
    starts, ends = [logits(window, {0: 3.0, 7: 2.0})], [logits(window, {0: 3.0, 8: 2.0})]
    # null score 6, best span 4: a difference of 2
    null = best_answer([window], starts, ends, SENTENCE, null_threshold=1.0)
    assert (null.text, null.start, null.end) == ("", 0, 0)
    assert best_answer([window], starts, ends, SENTENCE, null_threshold=3.0).text == "brown fox"
    assert best_answer([window], starts, ends, SENTENCE).text == "brown fox"  # v1: never null


def test_v2_null_score_is_the_lowest_over_windows():
    context, _, _ = words(20)
    windows = word_windows()[:2]
    starts = [logits(windows[0], {0: 10.0}), logits(windows[1], {0: 1.0, HEAD + 3: 2.0})]
    ends = [logits(windows[0], {0: 10.0}), logits(windows[1], {0: 1.0, HEAD + 3: 2.0})]
    answer = best_answer(windows, starts, ends, context, null_threshold=0.0)
    assert answer.text == "w07"  # null 2 (not 20) against the span's 4


def test_score_is_the_softmax_over_the_n_best_with_the_null_added_back():
    window = sentence_window()
    starts, ends = [logits(window, {7: 3.0, 6: 2.0})], [logits(window, {8: 3.0, 9: 1.0})]
    # spans: brown fox 6, quick brown fox 5, brown fox jumps 4, quick ... jumps 3; null 0
    v1 = best_answer([window], starts, ends, SENTENCE, n_best=2)
    assert v1.text == "brown fox"
    assert v1.score == pytest.approx(1 / (1 + math.exp(-1))) and v1.score > 0.5
    v2 = best_answer([window], starts, ends, SENTENCE, n_best=2, null_threshold=0.0)
    assert v2.score == pytest.approx(1 / (1 + math.exp(-1) + math.exp(-6)))


def test_a_span_seen_by_overlapping_windows_counts_once():
    context, _, _ = words(20)
    windows = word_windows()[:2]  # both hold token 5
    starts = [logits(windows[0], {HEAD + 5: 5.0}, -50.0),
              logits(windows[1], {HEAD + 1: 4.0, HEAD + 4: 4.5}, -50.0)]
    ends = [logits(windows[0], {HEAD + 5: 5.0}, -50.0),
            logits(windows[1], {HEAD + 1: 4.0, HEAD + 4: 4.5}, -50.0)]
    # w05 scores 10 in window 0 and 8 in window 1: counted once, at 10; w08 scores 9 and
    # w05-w08 8.5, in window 1 only
    answer = best_answer(windows, starts, ends, context)
    assert answer.text == "w05"
    assert answer.score == pytest.approx(1 / (1 + math.exp(-1) + math.exp(-1.5)))


def test_no_valid_span():
    (empty,) = make_windows(0, QUESTION, [], [], CLS, SEP, max_len=12, stride=2)
    starts, ends = [logits(empty, {0: 1.0})], [logits(empty, {0: 1.0})]
    assert best_answer([empty], starts, ends, "") == Answer("", 0.0, 0, 0)
    assert best_answer([empty], starts, ends, "", null_threshold=0.0) == Answer("", 1.0, 0, 0)


def test_padded_logits_are_cut_and_short_ones_refused():
    window = sentence_window()
    starts, ends = (np.concatenate([logits(window, {peak: 5.0}), np.full(4, 99.0)])
                    for peak in (7, 8))
    assert best_answer([window], [starts], [ends], SENTENCE).text == "brown fox"
    with pytest.raises(ValueError, match="3 logits for a window of 11 tokens"):
        best_answer([window], [starts[:3]], [ends], SENTENCE)


def test_end_to_end_with_a_trained_wordpiece_tokenizer():
    sentences = ["The fox sleeps under the Old Oak tree by the river.",
                 "Every morning the dog runs along the river to the mill.",
                 "The miller bakes bread and the children play in the field."]
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.train_from_iterator(sentences, trainers.WordPieceTrainer(
        vocab_size=120, special_tokens=["[UNK]", "[CLS]", "[SEP]"]))
    context = " ".join(sentences[1:] + sentences[:1])  # the answer near the end
    encoded = tokenizer.encode(context, add_special_tokens=False)
    question = tokenizer.encode("Where does the fox sleep?", add_special_tokens=False).ids
    windows = make_windows(3, question, encoded.ids, encoded.offsets,
                           tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]"),
                           max_len=len(question) + 3 + 12, stride=4)
    assert len(windows) > 2
    start = context.index("under the Old Oak tree")
    labelled = [label_window(w, start, start + len("under the Old Oak tree")) for w in windows]
    assert any(w.start for w in labelled)
    starts = [logits(w, {w.start: 8.0}, -4.0) for w in labelled]
    ends = [logits(w, {w.end: 8.0}, -4.0) for w in labelled]
    for threshold in (None, 0.0):
        answer = best_answer(labelled, starts, ends, context, null_threshold=threshold)
        assert answer.text == context[answer.start:answer.end] == "under the Old Oak tree"
