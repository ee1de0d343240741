"""docs/layout.md is the tree as it stands: the page equals what tests/layout_page.py writes
from the modules' docstrings."""

from tests.layout_page import PAGE, render, summary
from tests.module_graph import PACKAGE


def test_the_layout_page_is_written_from_the_tree():
    assert PAGE.read_text(encoding="utf-8") == render(), (
        "docs/layout.md differs from the tree: run python -m tests.layout_page")


def test_every_module_is_on_the_page():
    page = PAGE.read_text(encoding="utf-8")
    for path in PACKAGE.rglob("*.py"):
        if path.name != "__init__.py":
            assert f"| `{path.name}` |" in page, path


def test_a_summary_is_the_first_sentence():
    assert summary(PACKAGE / "atomic.py").startswith("Atomic file writes: ")
    assert summary(PACKAGE / "atomic.py").endswith(".")
