"""Configuration dataclasses whose fields carry their own help text, so that command-line
options generated from them say what each field does; and the check of `Literal` choices."""

from __future__ import annotations

import typing
from dataclasses import MISSING, Field, field
from typing import Any, Literal


def documented(default: Any = MISSING, help: str = "", *,
               default_factory: Any = MISSING) -> Any:
    """A dataclass field with `help`, read back by `help_of`."""
    return field(default=default, default_factory=default_factory, metadata={"help": help})


def help_of(spec: Field) -> str:
    return spec.metadata.get("help", "")


def check_choices(config: Any) -> None:
    """Every `Literal[...]` field of a dataclass instance holds one of its choices."""
    for name, hint in typing.get_type_hints(type(config)).items():
        choices = typing.get_args(hint) if typing.get_origin(hint) is Literal else None
        if choices and getattr(config, name) not in choices:
            raise ValueError(f"{name}={getattr(config, name)!r} is not one of "
                             f"{', '.join(map(str, choices))}")
