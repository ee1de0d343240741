"""lmlab's modules and the imports between them, read from the source (ast), not by importing:
every `import` counts, at the top, inside a function or under TYPE_CHECKING alike, since
each is a dependency the reader has to hold in mind."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "lmlab"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _owner(name: str) -> str | None:
    """The lmlab module that `name` (a module or a name inside one) comes from."""
    while name and name not in modules():
        name = name.rpartition(".")[0]
    return name or None


def _imported(module: str, node: ast.AST) -> set[str]:
    if isinstance(node, ast.Import):
        return {_owner(alias.name) for alias in node.names}
    if not isinstance(node, ast.ImportFrom):
        return set()
    base = node.module or ""
    if node.level:  # relative: from the module's package upwards
        package = module if modules()[module].name == "__init__.py" else module.rpartition(".")[0]
        parts = package.split(".")[: len(package.split(".")) - node.level + 1]
        base = ".".join([*parts, base] if base else parts)
    return {_owner(f"{base}.{alias.name}") for alias in node.names}


@cache
def imports() -> dict[str, frozenset[str]]:
    """Each lmlab module → the lmlab modules it imports."""
    graph = {}
    for module, path in modules().items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            found |= _imported(module, node)
        graph[module] = frozenset(found - {None, module})
    return graph


def package_of(module: str) -> str:
    """The package of lmlab that `module` belongs to (`lmlab.train.loop` → `lmlab.train`); a
    module at the root (`lmlab.cli`) is its own."""
    return ".".join(module.split(".")[:2])


@cache
def package_imports() -> dict[str, frozenset[str]]:
    """Each package of lmlab → the other packages its modules import."""
    graph: dict[str, set[str]] = {}
    for module, others in imports().items():
        package = package_of(module)
        graph.setdefault(package, set()).update(package_of(other) for other in others)
    return {package: frozenset(others - {package}) for package, others in graph.items()}


def circles(graph: dict[str, frozenset[str]] | None = None) -> list[list[str]]:
    """The strongly connected groups of more than one node of `graph` (by default the modules'
    imports), by Tarjan's algorithm."""
    graph, index, low, stack, on_stack, found = graph or imports(), {}, {}, [], set(), []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for other in graph[module]:
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in on_stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            group = []
            while not group or group[-1] != module:
                group.append(stack.pop())
                on_stack.discard(group[-1])
            if len(group) > 1:
                found.append(sorted(group))

    for module in graph:
        if module not in index:
            visit(module)
    return found


def reachable(module: str) -> set[str]:
    """Every module `module` imports, directly or through others."""
    seen, todo = set(), [module]
    while todo:
        for other in imports()[todo.pop()] - seen:
            seen.add(other)
            todo.append(other)
    return seen


def within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _function_imports(module: str, tree: ast.AST) -> list[tuple[str, int]]:
    """(lmlab module imported, line) of each import inside a function of `tree`."""
    found = []
    for function in ast.walk(tree):
        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            for node in ast.walk(function):
                found += [(other, node.lineno) for other in _imported(module, node)
                          if other is not None and other != module]
    return sorted(set(found), key=lambda item: item[1])


@cache
def lazy_imports() -> dict[str, list[tuple[str, int]]]:
    """Each lmlab module → the lmlab modules it imports inside a function, with the line."""
    graph = {}
    for module, path in modules().items():
        found = _function_imports(module, ast.parse(path.read_text(encoding="utf-8")))
        if found:
            graph[module] = found
    return graph
