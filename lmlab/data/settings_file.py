"""Settings files (a training, fine-tuning or data recipe): a TOML or YAML mapping of
field: value, read with every problem stated in one line naming the file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lmlab.data.errors import DataError

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

SUFFIXES = (".toml", ".yaml", ".yml")


def read_settings(path: Path, what: str) -> dict[str, Any]:
    """The mapping in `path`, a `what` ("config file", "recipe file") in TOML or YAML."""
    if not path.is_file():
        raise DataError(f"{what} does not exist" if not path.exists() else f"{what} is not a file",
                        path)
    if path.suffix not in SUFFIXES:
        raise DataError(f"a {what} must be .toml, .yaml or .yml", path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise DataError(f"a {what} must be UTF-8 text; this one is not (binary?)", path) from None
    values = _parse(path, text)
    if not isinstance(values, dict):
        raise DataError(f"a {what} must hold a mapping of field: value, not a "
                        f"{type(values).__name__}", path)
    return values


def _parse(path: Path, text: str) -> Any:
    if path.suffix == ".toml":
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as error:
            raise DataError(f"not valid TOML ({error})", path) from None
    import yaml

    try:
        return yaml.safe_load(text) or {}
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise DataError(f"not valid YAML ({where}{problem})", path) from None
