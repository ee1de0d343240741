"""metrics.jsonl read back by its one reader (lmlab.runs.metrics): whole lines only, a line cut
short by a crash skipped, the line being written left for the next read."""

from lmlab.runs.metrics import metrics_rows, read_metrics


def test_whole_lines_are_read_and_a_cut_line_skipped(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2, "lo\n{"step": 3}\n{"st')
    assert read_metrics(tmp_path) == [{"step": 1}, {"step": 3}]
    rows, following = metrics_rows(tmp_path)
    assert following == 3  # the unfinished fourth line is read next time
    assert metrics_rows(tmp_path, after=following) == ([], 3)
    with open(tmp_path / "metrics.jsonl", "a") as file:
        file.write('ep": 4}\n')
    assert metrics_rows(tmp_path, after=following) == ([{"step": 4}], 4)


def test_a_run_without_metrics_has_none(tmp_path):
    assert metrics_rows(tmp_path, after=2) == ([], 2)
    assert read_metrics(tmp_path) == []
