"""The export matrix (tests/export_matrix.py): every objective × family × (pre-trained, each
fine-tuning task) either exports with its outputs equal to the run's (max |difference| <= 1e-4)
or is refused in one line; the results file says which, the table in docs/export-import.md is
rendered from it, and what export does now matches it (a few cells in the fast set, every
cell in the slow one)."""

from __future__ import annotations

import json

import pytest

from tests.export_matrix import DOC, RESULTS, cells, doc_table, outcome, table

SAMPLE = [("mlm", "modernbert", "pre-trained"), ("mlm", "modernbert", "classify"),
          ("clm", "modern", "ner"), ("clm", "gpt2", "classify"), ("mntp", "modernbert", "qa")]


def recorded() -> dict:
    return json.loads(RESULTS.read_text())["results"]


def test_every_cell_is_recorded_as_an_export_within_bounds_or_a_one_line_refusal():
    results = recorded()
    assert sorted(results) == sorted(" / ".join(cell) for cell in cells())
    for name, found in results.items():
        if "refused" in found:
            assert found["refused"] and "\n" not in found["refused"], name
        else:
            assert found["max_difference"] <= 1e-4, name


def test_the_documented_table_is_the_one_the_results_give():
    assert doc_table(DOC.read_text()) == table(recorded())


def check_cell(cell: tuple[str, str, str]) -> None:
    found, expected = outcome(*cell), recorded()[" / ".join(cell)]
    assert found.keys() == expected.keys()
    if "refused" in found:
        assert found["refused"] == expected["refused"]
    else:
        assert found["class"] == expected["class"]
        assert found["max_difference"] <= 1e-4


@pytest.mark.parametrize("cell", SAMPLE, ids=" / ".join)
def test_sampled_cells_export_as_recorded(cell):
    check_cell(cell)


@pytest.mark.slow
@pytest.mark.parametrize("cell", cells(), ids=" / ".join)
def test_every_cell_exports_as_recorded(cell):
    check_cell(cell)
