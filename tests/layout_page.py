"""docs/layout.md, written from the tree: every package and module of lmlab/ with the first
sentence of its docstring. `python -m tests.layout_page` rewrites the page;
tests/test_layout_page.py fails when the committed page differs from it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.module_graph import PACKAGE, ROOT

PAGE = ROOT / "docs" / "layout.md"
HEAD = """# Layout

Every package and module of `lmlab/`, each with the first sentence of its docstring (this page is
written from the tree by `python -m tests.layout_page`, and the suite fails when it differs).
DESIGN's import rules hold over the module graph (tests/test_import_rules.py): no import circles,
among modules or among packages; `config/` imports only `config/`; `train/` never imports `infer/`;
`data/` never imports `objectives/`, and its read side (the dataset as training reads it, and
`text/`) never imports `data/preparation/`; `infer/` and `eval/` never import each other;
`finetune/` never imports `infer/`; `model/` imports only `config/` and `kernels/`; `tasks/` (the
task vocabulary: traits, formats and splits, fine-tuning settings and named tasks, the one framing
of rows, metrics, the bag-of-words floor) imports only `config/`, `data/`, the objectives' traits
and the root's helpers (`atomic`, `extras`); the consumers (`infer/`, `eval/`, `export/`, `serve/`,
`compare/`, `harness/`) never reach `train/` or a task's trainer, except the modules of `compare/`
that run its sub-runs; `export/`, `serve/` and `compare/` import nothing of `finetune/` directly
(but for those modules of `compare/`), and `infer/` only the task classes its predict reads a
fine-tuned run with; only the entry points import `planning/`, which imports nothing of
`compare/`. Imports of lmlab inside functions (for heavy libraries and command handlers) are
counted, and their number may not grow. No module is over 350 lines, no function over 50
(tests/test_sizes.py).
"""
# a full stop that ends a sentence: not one of "et al.", "e.g.", "i.e.", "..."
_SENTENCE_END = re.compile(r"(?<!\bal)(?<!\be\.g)(?<!\bi\.e)(?<!\.\.)\.(\s|$)")


def summary(path: Path) -> str:
    """The first sentence of the module's docstring, on one line."""
    docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    paragraph = " ".join(docstring.split("\n\n")[0].split())
    end = _SENTENCE_END.search(paragraph)
    return paragraph[: end.start() + 1] if end else paragraph


def _row(path: Path) -> str:
    text = summary(path).replace("|", "\\|")
    return f"| `{path.name}` | {text} |"


def _section(folder: Path) -> list[str]:
    name = folder.relative_to(ROOT).as_posix() + "/"
    init = folder / "__init__.py"
    lines = [f"## {name}", ""]
    if init.is_file() and summary(init):
        lines += [summary(init), ""]
    lines += ["| module | what it is |", "| --- | --- |"]
    lines += [_row(path) for path in sorted(folder.glob("*.py")) if path.name != "__init__.py"]
    lines += [f"| `{sub.name}/` | {summary(sub / '__init__.py')} |"
              for sub in sorted(folder.iterdir()) if (sub / "__init__.py").is_file()]
    return [*lines, ""]


def render() -> str:
    folders = [PACKAGE, *sorted(path.parent for path in PACKAGE.rglob("__init__.py")
                                if path.parent != PACKAGE)]
    lines = HEAD.splitlines() + [""]
    for folder in folders:
        lines += _section(folder)
    return "\n".join(lines).rstrip() + "\n"


if __name__ == "__main__":
    PAGE.write_text(render(), encoding="utf-8")
    print(f"wrote {PAGE.relative_to(ROOT)}")
