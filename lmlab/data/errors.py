"""The one exception for problems with the user's data."""

from __future__ import annotations

from pathlib import Path


class DataError(ValueError):
    """A problem with the user's data, stated in one line: `file:line: what is wrong`.

    The location comes first so that editors and terminals can jump to it; `path` and `line`
    stay available as attributes for callers that count or group problems.
    """

    def __init__(self, message: str, path: str | Path | None = None, line: int | None = None):
        self.path = path
        self.line = line
        where = "" if path is None else f"{path}:" if line is None else f"{path}:{line}:"
        # One line whatever the message quotes: a multi-line record must not break the log.
        one_line = " ".join(message.splitlines())
        super().__init__(f"{where} {one_line}" if where else one_line)
