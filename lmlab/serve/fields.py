"""Fields of a JSON request body, checked: a missing or mistyped field is a 400 naming it."""

from __future__ import annotations

from lmlab.serve.errors import ApiError

REQUIRED = object()


def field(body: dict, name: str, kind: type | tuple[type, ...], default=REQUIRED):
    if name not in body or body[name] is None:
        if default is REQUIRED:
            raise ApiError(400, f"the request needs the field {name!r}")
        return default
    value = body[name]
    # JSON numbers: an int is a fine float, and a bool is never a number.
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind in (int, float)):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise ApiError(400, f"{name!r} must be {names}, got {type(value).__name__}")
    return value


def bounded(body: dict, name: str, default: int, low: int, high: int) -> int:
    value = field(body, name, int, default)
    if not low <= value <= high:
        raise ApiError(400, f"{name!r} must be between {low} and {high}, got {value}")
    return value


def texts(body: dict, least: int = 1) -> list[str]:
    given = field(body, "texts", list)
    if len(given) < least or not all(isinstance(t, str) and t.strip() for t in given):
        raise ApiError(400, f"'texts' must hold at least {least} non-empty strings")
    return given
