"""Command-line options generated from configuration dataclasses, one per field, and the
configuration read back from them."""

from __future__ import annotations

import argparse
import json
import typing
from dataclasses import MISSING
from typing import Literal

from lmlab.config.fields import help_of
from lmlab.config.parsing import (
    field_specs,
    flat_fields,
    flat_values,
    parse_value,
    resolve_config,
)
from lmlab.config.rtd_recipe import recipe_settings


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _default(spec) -> object:
    return spec.default if spec.default is not MISSING else spec.default_factory()


def add_config_options(parser: argparse.ArgumentParser, specs: dict) -> None:
    """One option per configuration field (`--lr 3e-4`), booleans as switches, each with the
    field's help, default and choices. Values stay strings (None when not given) for the
    configuration to parse, so a given option can be told from a default. `specs` maps each
    field's name to its dataclass Field and type."""
    for name, (spec, kind) in specs.items():
        default = _default(spec)
        shown = "" if default is None else f" (default: {default})".replace("%", "%%")
        help_text = help_of(spec).replace("%", "%%") + shown
        if kind is bool and default is None:  # three ways: the switch, true/false, auto
            parser.add_argument(flag(name), dest=name, nargs="?", const="true", default=None,
                                metavar="true|false|auto", help=help_text)
            continue
        if kind is bool:
            parser.add_argument(flag(name), dest=name, action="store_const", const="true",
                                default=None, help=help_text)
            continue
        choices = typing.get_args(kind) if typing.get_origin(kind) is Literal else None
        parser.add_argument(flag(name), dest=name, default=None, choices=choices,
                            metavar=None if choices else name.upper(), help=help_text)


def options_given(args: argparse.Namespace, config_class: type) -> dict:
    """The fields of `config_class` given as options, parsed."""
    return {name: parse_value(name, getattr(args, name), config_class)
            for name in flat_fields(config_class) if getattr(args, name) is not None}


def config_from_args(args: argparse.Namespace, config_class: type):
    """The --config file, then the options given, as a `config_class`."""
    return resolve_config(args.config, options_given(args, config_class), config_class)


def options_of(config, leave_out: tuple[str, ...] = ()) -> list[str]:
    """The command-line words that rebuild `config` from the defaults (config_from_args read
    backwards): an option for each field, other than those left out, whose value is not its
    default (or its recipe's setting, `rtd_recipe`), so that a suggested command repeats
    every setting that shaped a run."""
    values = flat_values(config)
    recipe = recipe_settings(values)
    words = []
    for name, (spec, kind) in field_specs(type(config)).items():
        value = values[name]
        if name in leave_out or value == recipe.get(name, _default(spec)):
            continue
        if kind is bool:  # a switch can only turn on; every boolean field defaults to off
            words += [flag(name)] if value else []
        else:
            words += [flag(name), _as_text(value)]
    return words


def _as_text(value: object) -> str:
    if value is None:
        return "none"
    return json.dumps(value, sort_keys=True) if isinstance(value, dict) else str(value)
