"""Command-line options generated from configuration dataclasses, one per field, and the
configuration read back from them."""

from __future__ import annotations

import argparse
import typing
from dataclasses import MISSING
from typing import Literal

from lmlab.config.fields import help_of
from lmlab.config.parsing import flat_fields, parse_value, resolve_config


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def add_config_options(parser: argparse.ArgumentParser, specs: dict) -> None:
    """One option per configuration field (`--lr 3e-4`), booleans as switches, each with the
    field's help, default and choices. Values stay strings (None when not given) for the
    configuration to parse, so a given option can be told from a default. `specs` maps each
    field's name to its dataclass Field and type."""
    for name, (spec, kind) in specs.items():
        default = spec.default if spec.default is not MISSING else spec.default_factory()
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


def config_from_args(args: argparse.Namespace, config_class: type):
    """The --config file, then the options given, as a `config_class`."""
    overrides = {name: parse_value(name, getattr(args, name), config_class)
                 for name in flat_fields(config_class) if getattr(args, name) is not None}
    return resolve_config(args.config, overrides, config_class)
