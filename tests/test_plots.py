"""Plots make no warnings: the curves of a run stopped after its first step (no validation,
one point, or nothing at all) and a fine-tuning run's empty score panel are drawn without
matplotlib's empty-legend warning or any other."""

import warnings

import pytest

from lmlab.runs.plots import legend, plot_training_curves, pyplot

ONE_STEP = [{"kind": "train", "step": 1, "loss": 2.5, "lr": 1e-4, "seconds": 0.4}]
ONE_VALIDATION = [{"kind": "eval", "step": 1, "mlm/mlm_loss": 2.4, "accuracy": 0.5}]


@pytest.mark.parametrize("metrics", [[], ONE_STEP, ONE_STEP + ONE_VALIDATION],
                         ids=["no steps", "one step", "one step and a validation"])
@pytest.mark.parametrize("scores", [(), ("accuracy", "f1")], ids=["pre-training", "fine-tuning"])
def test_curves_of_a_run_stopped_after_one_step_warn_of_nothing(tmp_path, metrics, scores):
    out = tmp_path / "curves.png"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning fails the test
        plot_training_curves(metrics, out, scores, title="stopped early")
    assert out.read_bytes().startswith(b"\x89PNG")


def test_a_legend_is_drawn_only_where_something_is_labelled():
    figure, (empty, labelled) = pyplot().subplots(2, 1)
    empty.plot([1], [2])  # unlabelled: no legend, and no warning
    labelled.plot([1], [2], label="validation accuracy")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        legend(empty)
        legend(labelled)
    assert empty.get_legend() is None
    assert [t.get_text() for t in labelled.get_legend().get_texts()] == ["validation accuracy"]
    pyplot().close(figure)
