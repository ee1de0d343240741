"""A comparison's report on planted scores: one budget draws each objective's seeds side by side
(no FLOPs axis), several draw curves on a log FLOPs axis with plain labels; a pair of objectives
that shares no measure is said to, with the way to give it one, in the report and the
terminal; the held-out text is checked before any training. Matplotlib objects are read, not
pixels."""

import json

import numpy as np
import pytest

from lmlab.cli import main
from lmlab.compare import figures
from lmlab.compare.analysis import analyse
from lmlab.compare.arms import SubRun
from lmlab.compare.design import CompareConfig
from lmlab.compare.measures import BITS_PER_BYTE, check_held_out, pseudo_measure
from lmlab.compare.report import write_report
from lmlab.data.dataset import open_dataset
from tests.test_compare import world  # noqa: F401 — the synthetic language's dataset

PROBE = "probe x (accuracy)"


def planted(tmp_path, fractions: str, measures: dict[str, list[str]], seeds: int = 3,
            steps: int = 4):
    """An analysis of sub-runs whose scores are written, not trained: each objective scored on
    its `measures`, 0.5 + 0.1 per objective, at 1e11 FLOPs per step and `steps` steps at the
    full budget."""
    cfg = CompareConfig.of(list(measures), budget="4e11", fractions=fractions, seeds=seeds,
                           out=str(tmp_path))
    rng = np.random.default_rng(0)
    subs = []
    for index, (objective, names) in enumerate(measures.items()):
        for fraction in cfg.fractions:
            for seed in range(seeds):
                sub = SubRun(objective, seed, fraction, round(steps * fraction), None, 1e11, 512,
                             77.0, tmp_path / objective / f"{fraction:g}" / str(seed))
                sub.out.mkdir(parents=True)
                scores = {name: (0.5 + 0.1 * index + rng.normal(scale=0.02, size=40))[None]
                          for name in names}
                np.savez(sub.out / "scores.npz", **scores)
                (sub.out / "pretrained.json").write_text(json.dumps({"steps": sub.steps,
                                                                     "seconds": 1.0}))
                subs.append(sub)
    return cfg, analyse(cfg, subs, resamples=200)


@pytest.fixture
def figure_of(monkeypatch):
    """The figures the report draws, by file name, kept open to be read."""
    drawn = {}

    def keep(figure, path):
        figure.canvas.draw()
        drawn[path.name] = figure

    monkeypatch.setattr(figures, "save_png", keep)
    return drawn


def labels(axis) -> list[str]:
    return [label.get_text() for label in axis.get_xticklabels()]


def test_one_budget_draws_each_objectives_seeds_side_by_side(tmp_path, figure_of):
    cfg, analysis = planted(tmp_path, "1", {"mlm": [PROBE], "clm": [PROBE],
                                            "mix:clm=1,mlm=15": [PROBE]})
    figures.plot_curves(cfg, analysis, tmp_path / "curves.png")
    (axis,) = figure_of["curves.png"].axes
    assert labels(axis) == ["mlm", "clm", "mix:clm=1,mlm=15"]
    assert axis.get_xscale() == "linear" and "FLOPs" not in axis.get_xlabel()
    assert axis.xaxis.get_offset_text().get_text() == ""
    # one dot per pre-training seed at each objective's column, at its seed means; a bar at
    # their mean
    for column, objective in enumerate(cfg.objectives):
        dots = axis.collections[column].get_offsets()
        (row,) = [r for r in analysis.rows if r.objective == objective]
        assert np.allclose(np.round(dots[:, 0]), column) and len(dots) == 3
        assert np.allclose(dots[:, 1], row.seed_means)
        assert np.allclose(axis.get_lines()[column].get_ydata(), row.mean)
    assert "one budget, 4e11 training FLOPs" in figure_of["curves.png"]._suptitle.get_text()


def test_several_budgets_draw_curves_on_a_log_axis_with_plain_labels(tmp_path, figure_of):
    cfg, analysis = planted(tmp_path, "1/4,1", {"mlm": [PROBE], "clm": [PROBE]})
    figures.plot_curves(cfg, analysis, tmp_path / "curves.png")
    (axis,) = figure_of["curves.png"].axes
    assert axis.get_xscale() == "log" and axis.get_xlabel() == "training FLOPs"
    # labelled at the two budgets' FLOPs (1e11 and 4e11), no offset, no minor labels
    assert labels(axis) == ["1e11", "4e11"]
    assert axis.xaxis.get_offset_text().get_text() == ""
    assert [t.get_text() for t in axis.get_xticklabels(minor=True)] == []
    assert [len(line.get_xdata()) for line in axis.get_lines()] == [2, 2]


def test_the_flops_axis_is_labelled_at_the_budgets_run_none_crowding_another():
    assert figures.budget_ticks([4e11, 1e11, 2e11, 1.1e11, 4e11]) == [1.1e11, 2e11, 4e11]
    assert figures.budget_ticks([1.6e12, 2e12]) == [2e12]


def test_objectives_with_no_common_measure_are_said_to_share_none(tmp_path, figure_of):
    measures = {"mlm": [pseudo_measure("pseudo")], "clm": [BITS_PER_BYTE]}
    cfg, analysis = planted(tmp_path, "1", measures)
    assert analysis.verdicts == []
    (line,) = analysis.verdict_lines
    assert line.startswith("mlm and clm share no measure, so no verdict compares them (mlm: "
                           "pseudo bits per byte (pseudo); clm: bits per byte)")
    assert "--probe NAME=TASK:TRAIN:VALIDATION" in line and "--pairs" in line
    out = tmp_path / "report"
    out.mkdir()
    warned = "mlm budget 1 seed 0: something <went> wrong"
    record = write_report(cfg, analysis, tmp_path / "mlm", out, warnings=[warned])
    assert record["no_common_measure"] == [line] and record["verdicts"] == []
    assert record["machine"]["cpu"] and record["run_warnings"] == [warned]
    page = (out / "report.html").read_text()
    assert "share no measure" in page and "<th>verdict</th>" not in page
    assert "Runs that warned" in page and "something &lt;went&gt; wrong" in page
    assert "differences.png" not in figure_of and "curves.png" in figure_of


def test_an_eval_token_count_that_keeps_one_document_fails_before_training(world, tmp_path,  # noqa: F811
                                                                          capsys):
    dataset = open_dataset(world["data"])
    start, stop = dataset.validation.document_spans()[0]
    first = stop - start - 1  # its tokens, [EOS] left out as the held-out text leaves it
    check_held_out(dataset, first + 1)
    with pytest.raises(ValueError, match=rf"give --eval-tokens {first + 1} or more"):
        check_held_out(dataset, first)
    out = tmp_path / "lab"
    assert main(["compare", "--objectives", "mlm,clm", "--budget", "10", "--match", "steps",
                 "--data", world["data"], "--eval-tokens", "3", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("lmlab: error: --eval-tokens 3 keeps 1 of the ") and \
        len(err.splitlines()) == 1
    assert not out.exists()


def test_the_terminal_ends_with_the_verdicts_or_why_there_are_none(world, tmp_path,  # noqa: F811
                                                                   capsys):
    assert main(["compare", "--objectives", "clm,mlm", "--budget", "2", "--match", "steps",
                 "--fractions", "1", "--seeds", "1", "--data", world["data"], "--model",
                 "gpt2-tiny", "--seq-len", "32", "--batch-size", "4", "--eval-tokens", "200",
                 "--out", str(tmp_path / "lab")]) == 0
    shown = capsys.readouterr().out.splitlines()
    assert shown[-3:-1] == ["verdicts at the full budget (1):",
                            "  clm and mlm share no measure, so no verdict compares them (clm: "
                            "bits per byte, next-token accuracy; mlm: pseudo bits per byte "
                            "(pseudo)); add a fine-tuning probe (--probe "
                            "NAME=TASK:TRAIN:VALIDATION) or minimal pairs (--pairs) to score "
                            "both on the same ground"]
    assert shown[-1].startswith("report: ")


def test_the_forest_plot_gives_each_measure_its_own_panel_and_unit(tmp_path, figure_of):
    _, analysis = planted(tmp_path, "1", {"mlm": [pseudo_measure("mlm"), PROBE],
                                          "clm": [BITS_PER_BYTE, PROBE],
                                          "prefix": [BITS_PER_BYTE, PROBE]})
    figures.plot_differences(analysis, tmp_path / "differences.png")
    axes = figure_of["differences.png"].axes
    assert [axis.get_title() for axis in axes] == [BITS_PER_BYTE, PROBE]
    assert [axis.get_xlabel() for axis in axes] == [
        "advantage of the first objective in bits per byte",
        "advantage of the first objective in accuracy"]
    assert [[t.get_text() for t in axis.get_yticklabels()] for axis in axes] == [
        ["clm vs prefix"], ["mlm vs clm", "mlm vs prefix", "clm vs prefix"]]


def test_the_probe_plot_title_fits_its_figure(tmp_path, figure_of):
    cfg, analysis = planted(tmp_path, "1", {"mlm": [PROBE], "clm": [PROBE]})
    figures.plot_probes(cfg, analysis, tmp_path / "probes.png", {PROBE: 0.55})
    figure = figure_of["probes.png"]
    title = figure.get_suptitle()
    extent = figure._suptitle.get_window_extent()
    assert title.startswith("fine-tuning runs") and 0 <= extent.x0 < extent.x1 <= figure.bbox.x1


def test_one_seed_shows_no_standard_deviation(tmp_path):
    cfg, analysis = planted(tmp_path, "1", {"mlm": [PROBE], "clm": [PROBE]}, seeds=1)
    write_report(cfg, analysis, tmp_path, tmp_path)
    page = (tmp_path / "report.html").read_text()
    assert page.count("<td>— (one seed)</td>") == 2


@pytest.mark.parametrize(("steps", "measured"), [(50, False), (400, True)])
def test_a_sequence_phase_too_short_to_measure_gets_no_verdict(tmp_path, steps, measured):
    """then:clm,mlm@0.9 over 50 steps trains masked LM for 5: too few to be credited with (or
    blamed for) anything; over 400 steps (40 of them) its verdicts stand."""
    _, analysis = planted(tmp_path, "1", {"mlm": [PROBE], "then:clm,mlm@0.9": [PROBE]},
                          steps=steps)
    (pair,) = analysis.verdicts
    if measured:
        assert pair.says == pair.verdict.says and pair.says.endswith("better")
    else:
        assert pair.says == "no verdict" and pair.to_dict()["says"] == "no verdict"
        assert analysis.verdict_lines == [
            f"{PROBE}: mlm vs then:clm,mlm@0.9: no verdict: the mlm phase of then:clm,mlm@0.9 "
            "ran 5 steps (seed 0), too short to be measured (at least 20); give a larger "
            "--budget"]


def test_scores_all_below_the_bag_of_words_floor_are_said_to_be(tmp_path):
    from lmlab.compare.floors import Floors

    floors = Floors({PROBE: {"value": 0.74, "split": "validation"},
                     "probe y (accuracy)": {"value": 0.5, "split": "validation"}})
    below = {(PROBE, "mlm"): 0.70, (PROBE, "clm"): 0.74}
    assert floors.below({**below, ("probe y (accuracy)", "mlm"): 0.6}) == [
        f"{PROBE}: every objective scored at or below the bag-of-words floor 0.7400 (mlm "
        "0.7000, clm 0.7400)"]
    assert floors.below({**below, ("probe y (accuracy)", "mlm"): 0.4})[-1].startswith(
        "every probe scored below its bag-of-words floor")
    assert floors.below({(PROBE, "mlm"): 0.75, (PROBE, "clm"): 0.70}) == []
