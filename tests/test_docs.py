"""README.md and docs/ stay true to the code: every relative link reaches a file (and anchor),
every page is listed, every path and every `lmlab.NAME` of Python the pages name exists, the
hand-built model example runs, and the site builds with `mkdocs build --strict`."""

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
DOCUMENTS = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```", re.S | re.M)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*$", re.M)
PATH = re.compile(r"(?<![\w./])((?:lmlab|benchmarks|tests)/[\w./-]*\w)")
PYTHON_NAME = re.compile(r"\blmlab(?:\.\w+)+")


def prose(document: Path) -> str:
    """The document without its fenced code, where `#` starts a comment, not a heading."""
    return FENCE.sub("", document.read_text(encoding="utf-8"))


def anchors(document: Path) -> set[str]:
    """The anchors of a page's headings, as GitHub and MkDocs make them."""
    slug = lambda title: re.sub(r"[^\w\- ]", "", title.lower()).strip().replace(" ", "-")  # noqa: E731
    return {slug(title) for title in HEADING.findall(prose(document))}


def relative_links(document: Path) -> list[str]:
    return [target for target in LINK.findall(prose(document))
            if not re.match(r"[a-z]+:", target)]


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: path.name)
def test_relative_links_reach_a_file_and_anchor(document):
    for target in relative_links(document):
        path, _, anchor = target.partition("#")
        found = (document.parent / path).resolve() if path else document
        assert found.is_file(), f"{document.name}: {target} names no file"
        assert not anchor or anchor in anchors(found), f"{document.name}: no #{anchor} in {path}"


def test_index_and_site_list_every_page():
    pages = {page.name for page in DOCS.glob("*.md")} - {"index.md"}
    assert len(pages) >= 12
    assert pages <= set(relative_links(DOCS / "index.md"))
    assert pages <= set(re.findall(r":\s*([\w-]+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(),
                                   re.M))


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: path.name)
def test_named_paths_exist(document):
    text = document.read_text(encoding="utf-8")
    for path in PATH.findall(text):
        assert (ROOT / path).exists(), f"{document.name} names {path}, which is not there"


def resolve(name: str):
    """The object a dotted `lmlab.…` name reaches, importing modules on the way as Python
    would for `import lmlab.a.b`."""
    parts = name.split(".")
    found = importlib.import_module(parts[0])
    for depth in range(1, len(parts)):
        try:
            found = getattr(found, parts[depth])
        except AttributeError:
            found = importlib.import_module(".".join(parts[:depth + 1]))
    return found


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: path.name)
def test_python_names_exist(document):
    text = document.read_text(encoding="utf-8")
    code = [block for kind, block in FENCE.findall(text) if kind == "python"]
    inline = re.findall(r"`([^`]+)`", prose(document))
    for name in {name for snippet in code + inline for name in PYTHON_NAME.findall(snippet)}:
        try:
            resolve(name)
        except (AttributeError, ImportError) as error:
            pytest.fail(f"{document.name} names {name}: {error}")


def test_python_blocks_compile():
    for document in DOCUMENTS:
        for kind, block in FENCE.findall(document.read_text(encoding="utf-8")):
            if kind == "python":
                compile(block, str(document), "exec")


def test_build_your_own_example_runs():
    """python-api.md's model built by hand: a masked-LM loss that reaches every weight."""
    blocks = [block for kind, block in FENCE.findall((DOCS / "python-api.md").read_text())
              if kind == "python" and "loss.backward()" in block]
    assert len(blocks) == 1
    scope = {}
    exec(blocks[0], scope)  # the page's own example
    assert scope["loss"].isfinite() and scope["loss"] > 0
    assert any(p.grad is not None and p.grad.abs().sum() > 0
               for p in scope["model"].parameters())


def test_site_builds_strictly(tmp_path):
    """MkDocs refuses a link to a missing page or anchor, and a page left out of the nav."""
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                             str(tmp_path / "site")], cwd=ROOT, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "site" / "index.html").is_file()
