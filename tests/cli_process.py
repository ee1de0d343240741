"""`lmlab` run as a user runs it: the real entry point in a subprocess, with checks that a
command that did its work exits 0 and one that refuses says why in one line, never with a
traceback; and `lmlab serve` started on a free port, for requests to its JSON API."""

from __future__ import annotations

import http.client
import json
import os
import select
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Tiny models: one thread each is faster than two fighting over a busy machine's cores.
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}


def lmlab(*args, timeout: float = 600) -> subprocess.CompletedProcess:
    """`lmlab ARGS` that must succeed: exit 0 and no traceback."""
    result = run_lmlab(*args, timeout=timeout)
    assert result.returncode == 0, f"lmlab {_shown(args)} exited {result.returncode}:\n" \
                                   f"{result.stderr[-3000:]}"
    return result


def refused(*args, timeout: float = 600) -> str:
    """`lmlab ARGS` that must refuse: exit 1 and one `lmlab: error:` line, which is returned."""
    result = run_lmlab(*args, timeout=timeout)
    errors = [line for line in result.stderr.splitlines() if line.startswith("lmlab: error:")]
    assert result.returncode == 1 and len(errors) == 1, \
        f"lmlab {_shown(args)} exited {result.returncode}:\n{result.stderr[-3000:]}"
    return errors[0]


def torchrun(*args, processes: int = 2, timeout: float = 600) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node",
               str(processes), "--master-port", str(free_port()), "-m", "lmlab",
               *map(str, args)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=ENV,
                            cwd=ROOT)
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def run_lmlab(*args, timeout: float = 600) -> subprocess.CompletedProcess:
    """`lmlab ARGS`, whatever its exit status, but never with a traceback."""
    result = subprocess.run([sys.executable, "-m", "lmlab", *map(str, args)],
                            capture_output=True, text=True, timeout=timeout, env=ENV, cwd=ROOT)
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    return result


def _shown(args) -> str:
    return " ".join(map(str, args))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def http_request(host: str, port: int, method: str, path: str, body=None,
                 raw: bytes | None = None) -> tuple[int, object]:
    """(status, decoded JSON or text) of one request to a server of `lmlab serve`."""
    connection = http.client.HTTPConnection(host, port, timeout=120)
    content = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    connection.request(method, path, content, {"Content-Type": "application/json"})
    response = connection.getresponse()
    text = response.read().decode()
    connection.close()
    is_json = response.getheader("Content-Type", "").startswith("application/json")
    return response.status, json.loads(text) if is_json else text


class Served:
    """A running `lmlab serve` and requests to it."""

    def __init__(self, port: int) -> None:
        self.port = port

    def request(self, method: str, path: str, body: dict | None = None) -> tuple[int, object]:
        return http_request("127.0.0.1", self.port, method, path, body)


@contextmanager
def serving(*runs, timeout: float = 120) -> Iterator[Served]:
    """`lmlab serve RUNS` on a free port, until the block ends."""
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "lmlab", "serve", *map(str, runs),
                               "--port", str(port)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=ENV, cwd=ROOT)
    try:
        ready, _, _ = select.select([server.stdout], [], [], timeout)
        assert ready, f"lmlab serve said nothing in {timeout} s"
        line = server.stdout.readline()  # "serving … at http://…", once it listens
        assert line.startswith("serving"), f"lmlab serve: {line}{server.stderr.read()[-3000:]}"
        yield Served(port)
    finally:
        server.terminate()
        try:
            _, stderr = server.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            server.kill()
            _, stderr = server.communicate()
        assert "Traceback" not in stderr, stderr[-3000:]
