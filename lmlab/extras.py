"""Optional extras: a feature whose package is missing is refused in one line that names the
`pip install` bringing it."""

from __future__ import annotations

import importlib.util


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ValueError:  # sys.modules holds None for it: imports of it are blocked
        return False


def require_extra(module: str, extra: str, needed_by: str, package: str | None = None) -> None:
    """Refuse `needed_by` in one line, naming the lmlab extra that installs it, when the
    optional `module` (of `package`, when it is named otherwise) is missing."""
    if not installed(module):
        raise ValueError(f"{needed_by} needs the {package or module} package: "
                         f"pip install 'lmlab[{extra}]'")
