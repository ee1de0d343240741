"""What a benchmark's results file says about where it ran: the machine by its CPU's name
(read through lmlab.kernels.machine, the one reading of /proc/cpuinfo), and paths that mean the
same on any machine. A path in the repository is written relative to it, one in the shared
data folder beside it as shared/..., one in the benchmark's scratch folder as $WORK/..., in
the temporary directory as $TMP/..., in the home directory as $HOME/...; any other keeps its
last part only, as $ELSEWHERE/NAME. Results are written through `write_results`, which does
all of that.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shlex
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"  # the shared data folder sits beside the checkout
# An absolute path not written by one of the places above: POSIX, or a drive letter.
OTHER_PATH = re.compile(r"(?<![\w.~+/<$-])/[\w.~+-]+(?:/[\w.~+-]+)*/?|\b[A-Za-z]:\\[^\s\"']*")


def machine(**extra) -> dict:
    """The machine a result was measured on: its CPU's model name, architecture, cores and
    torch version, with `extra` facts (threads, load, GPU) beside them."""
    import torch

    from lmlab.kernels.machine import cpu_name

    return {"cpu": cpu_name(), "architecture": platform.machine(), "cpus": os.cpu_count(),
            "torch": torch.__version__, **extra}


def _places(work: Path | None) -> list[tuple[str, str]]:
    """(absolute prefix, what it is written as), the most specific first."""
    named = [(ROOT, ""), (SHARED, "shared/"), (Path(tempfile.gettempdir()), "$TMP/"),
             (Path.home(), "$HOME/")]
    if work is not None:
        named.insert(0, (Path(work), "$WORK/"))
    places = []
    for path, written in named:
        if path.resolve() == Path("/"):  # HOME=/: every path would match it
            continue
        for form in {str(path), str(path.resolve())}:
            places.append((form.rstrip("/") + "/", written))
            places.append((form.rstrip("/"), written.rstrip("/") or "."))
    return sorted(places, key=lambda place: -len(place[0]))


def portable_text(text: str, work: Path | None = None) -> str:
    for prefix, written in _places(work):
        # a folder's own name ends the match: /work/main is not the start of /work/mainly
        ends = "" if prefix.endswith("/") else r"(?![\w.~+-])"
        text = re.sub(re.escape(prefix) + ends, lambda _, w=written: w, text)
    return OTHER_PATH.sub(lambda m: "$ELSEWHERE/" + _last_part(m.group(0)), text)


def _last_part(path: str) -> str:
    return re.split(r"[\\/]", path.rstrip("/\\"))[-1]


def portable(value, work: Path | None = None):
    """`value` (a results tree: dicts, lists, strings, numbers) with every path in its strings
    and keys written so that it names no folder of this machine."""
    if isinstance(value, dict):
        return {portable(key, work): portable(item, work) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [portable(item, work) for item in value]
    if isinstance(value, Path):
        return portable_text(str(value), work)
    return portable_text(value, work) if isinstance(value, str) else value


def made_by() -> dict:
    """The command that wrote a results file (as run from the project's root), the commit it
    ran at (noting changes not committed) and when it finished (UTC)."""
    import subprocess
    from datetime import datetime, timezone

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True,
                              text=True).stdout.strip()

    script = Path(sys.argv[0]).resolve()
    shown = script.relative_to(ROOT) if script.is_relative_to(ROOT) else Path(script.name)
    return {"command": shlex.join(["python", str(shown), *sys.argv[1:]]),
            "commit": git("rev-parse", "HEAD"),
            "uncommitted_changes": bool(git("status", "--porcelain", "--untracked-files=no")),
            "made_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}


def write_results(path: Path, results: dict, work: Path | None = None) -> None:
    """Write `results` as JSON (atomically) with portable paths, and what made it (`made_by`);
    `work` is the benchmark's scratch folder."""
    from lmlab.atomic import write_text_atomic

    results = {**results, "made_by": made_by()}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(portable(results, work), indent=2) + "\n")
