"""The set-up the suite runs under is the one requirements-dev.txt pins: every pinned package,
and every package of pyproject's `dev` extra, is installed (at its pinned version) and found
under its import name. Tests that need an optional package import-skip it, so without this a
machine missing one would pass them as skipped; here a missing extra fails."""

import importlib.metadata
import importlib.util
import re
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pyproject's own dependency below 3.11
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
# distribution → the module it installs, where the two names differ
IMPORT_NAMES = {"sentence-transformers": "sentence_transformers", "mlflow-skinny": "mlflow",
                "scikit-learn": "sklearn"}
PIN = re.compile(r"^([A-Za-z0-9_.-]+)==([^\s#;]+)")


def pinned() -> dict[str, str]:
    lines = (ROOT / "requirements-dev.txt").read_text(encoding="utf-8").splitlines()
    return dict(match.groups() for line in lines if (match := PIN.match(line.strip())))


def extra(name: str) -> list[str]:
    """The distributions pyproject's extra `name` names (lmlab[...] expanded)."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    found = []
    for spec in extras["project"]["optional-dependencies"][name]:
        if (inner := re.fullmatch(r"lmlab\[(\w+)\]", spec)) is not None:
            found += extra(inner[1])
        else:
            found.append(re.split(r"[<>=!~\[;\s]", spec, maxsplit=1)[0])
    return found


def test_the_pins_are_read():
    assert {"torch", "scikit-learn", "datatrove", "ray", "mkdocs"} <= set(pinned())
    assert {"pytest", "sentence-transformers", "transformers", "gguf"} <= set(extra("dev"))


@pytest.mark.parametrize("name", sorted(set(pinned()) | set(extra("dev"))))
def test_an_extra_the_suite_needs_is_installed(name):
    try:
        installed = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        pytest.fail(f"{name} is not installed: pip install -r requirements-dev.txt")
    module = IMPORT_NAMES.get(name, name.replace("-", "_"))
    assert importlib.util.find_spec(module) is not None, f"{name} installs no {module} module"
    if name in pinned():  # a local build tag (2.13.0+cpu) is the pinned version
        assert installed.split("+")[0] == pinned()[name].split("+")[0], \
            f"{name} {installed} is installed; requirements-dev.txt pins {pinned()[name]}"
