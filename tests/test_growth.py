"""Warm-ups of what a pre-training step reads: the sequence length (rows cut into 4, 3, 2
pieces, then whole, tokens per step about the same) and the batch size (the first rows of each
micro-batch, from a quarter to all). Off, a step reads each block as it came; on, a resumed
run continues as the uninterrupted one, and validation reads whole rows."""


import pytest
import torch

from lmlab.train import entry as pretraining
from lmlab.train import growth
from lmlab.train.growth import GrowingRows, pieces_per_row, rows_read
from tests.test_resume_rules import config, cut_after, dataset, train_rows  # noqa: F401


def test_pieces_follow_a_line_from_a_quarter_of_the_row_to_all_of_it():
    # the line's share of the row at step s of 9: (1 + 3s/9) / 4; pieces: the fewest below it
    assert [pieces_per_row(step, 9) for step in range(11)] == [4, 3, 3, 2, 2, 2, 2, 2, 2, 1, 1]
    assert all(pieces_per_row(step, 0) == 1 for step in (0, 5))  # no warm-up
    assert pieces_per_row(0, 1) == 4 and pieces_per_row(1, 1) == 1


def test_rows_are_cut_into_their_pieces_in_order():
    tokens = torch.arange(26).view(2, 13)
    quartered = GrowingRows(seq_len_warmup_steps=10).of(tokens, 0)
    assert quartered.tolist() == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11],
                                  [13, 14, 15], [16, 17, 18], [19, 20, 21], [22, 23, 24]]
    assert GrowingRows(seq_len_warmup_steps=10).of(tokens, 2).shape == (6, 4)  # thirds
    assert GrowingRows(seq_len_warmup_steps=10).of(tokens, 10) is tokens
    assert GrowingRows().of(tokens, 0) is tokens  # off: the block as it came


def test_rows_read_follow_a_line_from_a_quarter_of_the_batch_to_all_of_it():
    assert [rows_read(step, 4, 8) for step in range(6)] == [2, 3, 5, 6, 8, 8]
    assert rows_read(0, 4, 2) == 1  # at least one row
    assert all(rows_read(step, 0, 8) == 8 for step in (0, 3))  # no warm-up


def test_both_warmups_read_the_first_rows_then_cut_them():
    tokens = torch.arange(32).view(4, 8)
    both = GrowingRows(seq_len_warmup_steps=4, batch_size_warmup_steps=4).of(tokens, 0)
    assert both.tolist() == [[0, 1], [2, 3], [4, 5], [6, 7]]  # row 0 of 4, in quarters
    assert GrowingRows(batch_size_warmup_steps=4).of(tokens, 2).tolist() == (
        tokens[:2].tolist())
    assert GrowingRows(batch_size_warmup_steps=4).of(tokens, 4) is tokens


@pytest.fixture
def read(monkeypatch) -> dict[str, list]:
    """The shapes each training step read, and the validation blocks' shapes."""
    seen = {"steps": [], "validation": []}
    reading, validating = GrowingRows.of, pretraining.validate

    def recording(self, tokens, step):
        rows = reading(self, tokens, step)
        seen["steps"].append(tuple(rows.shape))
        return rows

    def validation(model, objectives, blocks, *args):
        seen["validation"] += [tuple(block.shape) for block in blocks]
        return validating(model, objectives, blocks, *args)

    monkeypatch.setattr(GrowingRows, "of", recording)
    monkeypatch.setattr(pretraining, "validate", validation)
    return seen


def warmup_config(tmp_path, **changes):
    return config(tmp_path, **{"seq_len_warmup_steps": 3, "steps": 6, "keep_last": 3,
                               **changes})


def test_the_run_reads_short_rows_first_and_validates_whole_ones(tmp_path, dataset,  # noqa: F811
                                                                 read):
    pretraining.pretrain(warmup_config(tmp_path), dataset)
    assert read["steps"] == [(32, 8), (16, 16), (16, 16), (8, 32), (8, 32), (8, 32)]
    assert read["validation"] and set(read["validation"]) == {(8, 32)}
    tokens = [row["tokens"] for row in train_rows(tmp_path)]
    assert [b - a for a, b in zip([0, *tokens], tokens, strict=False)] == [256] * 6


def test_a_resume_inside_the_warmup_continues_it(tmp_path, dataset, read):  # noqa: F811
    whole = pretraining.pretrain(warmup_config(tmp_path / "whole"), dataset)
    plain = pretraining.pretrain(config(tmp_path / "plain", steps=6, keep_last=3), dataset)
    assert plain and train_rows(tmp_path / "plain")[0]["loss"] != (
        train_rows(tmp_path / "whole")[0]["loss"])  # the short rows learn otherwise
    cut_after(whole, tmp_path / "cut" / "run", step=2)  # inside the warm-up
    read["steps"].clear()
    pretraining.pretrain(warmup_config(tmp_path / "cut", resume=True), dataset)
    assert read["steps"] == [(16, 16), (8, 32), (8, 32), (8, 32)]
    learnt = [[(row["step"], row["loss"]) for row in train_rows(tmp_path / run)]
              for run in ("whole", "cut")]
    assert learnt[0] == learnt[1]


def test_the_batch_warmup_reads_a_growing_share_and_a_resume_continues_it(
        tmp_path, dataset, read):  # noqa: F811
    changes = {"seq_len_warmup_steps": 0, "batch_size_warmup_steps": 4}
    whole = pretraining.pretrain(warmup_config(tmp_path / "whole", **changes), dataset)
    assert read["steps"] == [(2, 32), (3, 32), (5, 32), (6, 32), (8, 32), (8, 32)]
    tokens = [row["tokens"] for row in train_rows(tmp_path / "whole")]
    assert [b - a for a, b in zip([0, *tokens], tokens, strict=False)] == [
        32 * rows for rows in (2, 3, 5, 6, 8, 8)]
    cut_after(whole, tmp_path / "cut" / "run", step=2)
    read["steps"].clear()
    pretraining.pretrain(warmup_config(tmp_path / "cut", resume=True, **changes), dataset)
    assert read["steps"] == [(5, 32), (6, 32), (8, 32), (8, 32)]
    learnt = [[(row["step"], row["loss"], row["tokens"]) for row in train_rows(tmp_path / run)]
              for run in ("whole", "cut")]
    assert learnt[0] == learnt[1]


def test_the_warmup_is_refused_where_rows_cannot_be_cut(tmp_path, dataset):  # noqa: F811
    with pytest.raises(ValueError, match="reads whole sentence pairs a row") as error:
        pretraining.pretrain(warmup_config(tmp_path, objective="mlm+nsp", model="bert-tiny"),
                             dataset)
    assert "\n" not in str(error.value)
    assert not (tmp_path / "run").exists()
    with pytest.raises(ValueError, match="needs a --seq-len of at least 8, got 7"):
        config(tmp_path, seq_len_warmup_steps=3, seq_len=7)
    for name in ("seq_len_warmup_steps", "batch_size_warmup_steps"):
        with pytest.raises(ValueError, match=f"{name} must be 0 or more"):
            config(tmp_path, **{name: -1})
    assert growth.WARMUP_START_DIVISOR == 4
