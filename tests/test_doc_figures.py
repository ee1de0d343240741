"""Every measured figure in README.md and docs/ is traceable: beside it, an HTML comment (which
the rendered page does not show) names the results file and where in it the figure is,

    <!-- figure 0.856: benchmarks/results/distill_sst2.json teacher.test_accuracy.mean -->

and this test reads the file and checks the figure as shown. A path walks the JSON tree by
keys (a key may itself hold dots or slashes: the longest key that fits is taken) and list
indices; paths and numbers may be combined with + - * / where a figure is arithmetic on
measured values (a ratio, seconds as minutes). The figure holds if the value rounds to it at
the figure's own precision ("0.846": three decimals; "84.6%": the value times 100); the figure
must also appear in the paragraph the comment is in (or the one just above a paragraph of
comments only; a typographic minus reads as "-"), so that a figure edited in the prose without
its file fails too.
"""

import ast
import json
import operator
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FIGURE = re.compile(r"<!--\s*figure\s+(?P<shown>[^\s:]+):\s*(?P<file>\S+)\s+(?P<expr>.+?)\s*-->",
                    re.S)
COMMENT = re.compile(r"<!--.*?-->", re.S)
FENCE = re.compile(r"^```.*?^```", re.S | re.M)  # code: examples, not figures
OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
             ast.Div: operator.truediv}


def walk(tree, path: str):
    """The value at a dotted `path` in a JSON tree; a key may hold dots (the longest fits)."""
    if not path:
        return tree
    if isinstance(tree, list):
        index, _, rest = path.partition(".")
        return walk(tree[int(index)], rest)
    fitting = [key for key in tree if path == key or path.startswith(key + ".")]
    if not fitting:
        raise KeyError(f"no key of {sorted(tree)[:8]} starts {path!r}")
    key = max(fitting, key=len)
    return walk(tree[key], path[len(key) + 1:])


def evaluate(expression: str, tree) -> float:
    """`expression`: paths and numbers joined by + - * /, each path read from `tree`."""
    names, words = {}, []
    for word in shlex.split(expression):
        if word in "+-*/()" or re.fullmatch(r"[\d.]+(?:e-?\d+)?", word):
            words.append(word)
        else:
            names[f"v{len(names)}"] = float(walk(tree, word))
            words.append(f"v{len(names) - 1}")
    return _arithmetic(ast.parse(" ".join(words), mode="eval").body, names)


def _arithmetic(node, names: dict) -> float:
    if isinstance(node, ast.BinOp) and type(node.op) in OPERATORS:
        return OPERATORS[type(node.op)](_arithmetic(node.left, names),
                                        _arithmetic(node.right, names))
    if isinstance(node, ast.Constant):
        return float(node.value)
    if isinstance(node, ast.Name):
        return names[node.id]
    raise ValueError(f"not arithmetic: {ast.dump(node)}")


def agrees(shown: str, value: float) -> bool:
    """Whether `value` rounds to the figure `shown` ("0.846", "1,234", "84.6%", "8.8x")."""
    number = shown.rstrip("x×%").lstrip("±~").replace(",", "").replace("−", "-")
    scale = 100 if shown.endswith("%") else 1
    decimals = len(number.partition(".")[2])
    return abs(value * scale - float(number)) <= 0.5 * 10 ** -decimals + 1e-9


def figures(document: Path) -> list[tuple[str, str, str, str]]:
    """(shown, file, expression, the paragraph's prose) for each figure comment."""
    blocks = re.split(r"\n\s*\n", FENCE.sub("", document.read_text(encoding="utf-8")))
    found = []
    for number, block in enumerate(blocks):
        prose = COMMENT.sub("", block).strip()
        if not prose and number:  # a paragraph of comments speaks of the one above it
            prose = COMMENT.sub("", blocks[number - 1])
        for match in FIGURE.finditer(block):
            found.append((match["shown"], match["file"], match["expr"], prose))
    return found


CASES = [(document, *figure) for document in DOCUMENTS for figure in figures(document)]


def test_the_pages_carry_figures():
    assert len(CASES) >= 40
    assert {document.name for document, *_ in CASES} >= {
        "finetune.md", "continued-pretraining.md", "pretrain.md", "speed.md", "serve.md"}


@pytest.mark.parametrize(("document", "shown", "file", "expression", "prose"), CASES,
                         ids=[f"{case[0].name}:{case[1]}" for case in CASES])
def test_a_figure_is_what_its_results_file_holds(document, shown, file, expression, prose):
    assert file.startswith("benchmarks/results/"), f"{file} is not a results file"
    tree = json.loads((ROOT / file).read_text(encoding="utf-8"))
    value = evaluate(expression, tree)
    assert agrees(shown, value), f"{document.name}: {shown} shown, {file} holds {value:.6g}"
    assert shown.lstrip("±~").replace("−", "-") in prose.replace("\n", " ").replace("−", "-"), \
        f"{document.name}: {shown} is not in the paragraph its comment is in"


def test_the_check_fails_a_figure_that_drifted():
    tree = {"runs": {"minilm/sst2": {"accuracy": {"mean": 0.8459}}}, "seconds": 3180.0}
    assert agrees("0.846", walk(tree, "runs.minilm/sst2.accuracy.mean"))
    assert not agrees("0.849", walk(tree, "runs.minilm/sst2.accuracy.mean"))
    assert agrees("84.6%", evaluate("runs.minilm/sst2.accuracy.mean", tree))
    assert agrees("53", evaluate("seconds / 60", tree))
    assert not agrees("52", evaluate("seconds / 60", tree))
    with pytest.raises(KeyError):
        walk(tree, "runs.minilm/sst2.accuracy.median")


def test_a_figure_changed_in_the_prose_alone_is_found(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("It reached 0.850 accuracy.\n<!-- figure 0.846: benchmarks/results/x.json "
                    "a.b -->\n", encoding="utf-8")
    ((shown, _, expression, prose),) = figures(page)
    assert (shown, expression) == ("0.846", "a.b") and shown not in prose
