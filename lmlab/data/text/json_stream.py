"""The values of a JSON file, streamed: the elements of a top-level array, or each of several
top-level values, parsed as they complete so that a large file never sits in memory whole."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator
from pathlib import Path

from lmlab.data.errors import DataError

JSON_READ_CHARS = 1 << 16
WHITESPACE = re.compile(r"[ \t\r\n]*")
ARRAY_GAP = re.compile(r"[ \t\r\n,]*")  # between array elements


def json_values(stream: io.TextIOBase, path: Path) -> Iterator[tuple[int, object]]:
    """(line number, value) for each element of a top-level array, or each top-level value.

    Decodes values with `raw_decode` as they complete in a growing window of the file, so a
    large array never sits in memory whole.
    """
    decoder = json.JSONDecoder()
    buffer, position, line = "", 0, 1  # `line` is the line of buffer[position]
    at_end, in_array = False, None

    def read_more() -> None:
        nonlocal buffer, position, at_end
        # Read at least as much as is pending, so a huge value is re-parsed O(log n) times.
        chunk = stream.read(max(JSON_READ_CHARS, len(buffer) - position))
        at_end = not chunk
        buffer, position = buffer[position:] + chunk, 0

    while True:
        gap = (ARRAY_GAP if in_array else WHITESPACE).match(buffer, position).end()
        line += buffer.count("\n", position, gap)
        position = gap
        if position == len(buffer):
            if not at_end:
                read_more()
                continue
            if in_array:
                raise DataError("the JSON array is never closed with ']'", path, line)
            return
        if in_array is None:
            in_array = buffer[position] == "["
            position += in_array
            continue
        if in_array and buffer[position] == "]":
            return
        try:
            value, end = decoder.raw_decode(buffer, position)
        except json.JSONDecodeError as error:
            if at_end:
                raise DataError("not valid JSON", path,
                                line + buffer.count("\n", position, error.pos)) from None
            read_more()  # the value may go on in the part not read yet
            continue
        yield line, value
        line += buffer.count("\n", position, end)
        position = end
