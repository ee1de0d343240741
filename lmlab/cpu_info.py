"""Facts about this machine's CPU, read once from /proc/cpuinfo (Linux); elsewhere, what the
platform module knows."""

from __future__ import annotations

import functools
import platform
from pathlib import Path


@functools.cache
def _cpuinfo() -> dict[str, str]:
    """The first processor's fields."""
    fields: dict[str, str] = {}
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return fields
    for line in text.splitlines():
        if not line.strip():
            break
        name, _, value = line.partition(":")
        fields[name.strip()] = value.strip()
    return fields


def cpu_name() -> str:
    return _cpuinfo().get("model name") or platform.processor() or platform.machine()


def cpu_vendor() -> str:
    """'GenuineIntel', 'AuthenticAMD', ... or '' where unknown."""
    return _cpuinfo().get("vendor_id", "")
