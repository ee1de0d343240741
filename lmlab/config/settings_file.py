"""Settings files (a training, fine-tuning or data recipe): a TOML or YAML mapping of
field: value, read with every problem stated in one line naming the file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

SUFFIXES = (".toml", ".yaml", ".yml")


def read_settings(path: Path, what: str) -> dict[str, Any]:
    """The mapping in `path`, a `what` ("config file", "recipe file") in TOML or YAML."""
    if not path.is_file():
        problem = "does not exist" if not path.exists() else "is not a file"
        raise _error(path, f"{what} {problem}")
    if path.suffix not in SUFFIXES:
        raise _error(path, f"a {what} must be .toml, .yaml or .yml")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise _error(path, f"a {what} must be UTF-8 text; this one is not (binary?)") from None
    values = _parse(path, text)
    if not isinstance(values, dict):
        raise _error(path, f"a {what} must hold a mapping of field: value, not a "
                           f"{type(values).__name__}")
    return values


def _parse(path: Path, text: str) -> Any:
    if path.suffix == ".toml":
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as error:
            raise _error(path, f"not valid TOML ({error})") from None
    import yaml

    try:
        return yaml.safe_load(text) or {}
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise _error(path, f"not valid YAML ({where}{problem})") from None


def _error(path: Path, message: str) -> ValueError:
    """The one-line error naming the file first, as editors and terminals jump to it."""
    return ValueError(f"{path}: {message}")
