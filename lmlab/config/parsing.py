"""Generic parsing of configuration dataclasses: a field whose type is itself a configuration
dataclass (the objective's options) is grouped in code but flat for users (`--mlm-rate 0.3` on
the command line, `mlm_rate: 0.3` in a file).

Sources, later ones winning: defaults → a recipe's settings (lmlab/config/rtd_recipe.py) →
a YAML or TOML file → command-line overrides. An
unknown field is named with the closest known one.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import types
import typing
from dataclasses import fields
from pathlib import Path
from typing import Any

from lmlab.config.rtd_recipe import recipe_settings
from lmlab.config.settings_file import read_settings


def _reduced(hint: Any) -> Any:
    """`X | None` → X."""
    if isinstance(hint, types.UnionType):
        return next(arg for arg in typing.get_args(hint) if arg is not type(None))
    return hint


def field_specs(config_class: type) -> dict[str, tuple[dataclasses.Field, Any]]:
    """Every field a user can set, by flat name → (its dataclass Field, its type with
    `X | None` reduced to X); fields of a grouped configuration appear under their own names."""
    found = {}
    hints = typing.get_type_hints(config_class)
    for spec in fields(config_class):
        kind = _reduced(hints[spec.name])
        if dataclasses.is_dataclass(kind):
            found.update(field_specs(kind))
        else:
            found[spec.name] = (spec, kind)
    return found


def flat_fields(config_class: type) -> dict[str, Any]:
    """Every field a user can set, by flat name → type."""
    return {name: kind for name, (_, kind) in field_specs(config_class).items()}


def flat_values(config: Any) -> dict[str, Any]:
    """Every field's value in `config`, by flat name (grouped fields under their own names)."""
    found = {}
    for spec in fields(config):
        value = getattr(config, spec.name)
        if dataclasses.is_dataclass(value):
            found.update(flat_values(value))
        else:
            found[spec.name] = value
    return found


def check_field(name: str, config_class: type) -> None:
    names = list(flat_fields(config_class))
    if name not in names:
        close = difflib.get_close_matches(name, names, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"unknown config field {name!r}{hint}")


KIND_NAMES = {int: "an integer", float: "a number", bool: "true or false", dict: "a JSON object"}


def parse_value(name: str, text: str, config_class: type) -> Any:
    """A command-line string → the field's type (numbers, booleans, None, dicts as JSON)."""
    check_field(name, config_class)
    kind = flat_fields(config_class)[name]
    if text.lower() in ("none", "null") or (kind is bool and text.lower() == "auto"):
        return None
    try:
        if kind is bool:
            if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError
            return text.lower() in ("true", "1", "yes")
        if kind in (int, float):
            return kind(text)
        if kind is dict:
            return json.loads(text)
    except ValueError:
        raise ValueError(f"{name} takes {KIND_NAMES[kind]}, got {text!r}") from None
    return text


def read_config_file(path: Path, config_class: type) -> dict:
    values = read_settings(path, "config file")
    for name in values:
        check_field(name, config_class)
    return values


def build_config(values: dict, config_class: type):
    """A configuration from flat field values; grouped fields are gathered into their group."""
    hints = typing.get_type_hints(config_class)
    direct = {}
    for spec in fields(config_class):
        group = _reduced(hints[spec.name])
        if dataclasses.is_dataclass(group):
            mine = {k: values[k] for k in flat_fields(group) if k in values}
            direct[spec.name] = build_config(mine, group)
        elif spec.name in values:
            direct[spec.name] = values[spec.name]
    return config_class(**direct)


def resolve_config(file: Path | None, overrides: dict | None, config_class: type):
    """A `config_class` from its defaults, then the settings of a recipe the file or
    `overrides` name (`rtd_recipe`), then `file` (when given), then `overrides`."""
    values = read_config_file(file, config_class) if file is not None else {}
    for name in overrides or {}:
        check_field(name, config_class)
    values.update(overrides or {})
    return build_config({**recipe_settings(values), **values}, config_class)
