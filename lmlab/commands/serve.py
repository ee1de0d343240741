"""`lmlab serve`: the playground page and its JSON API for the runs (and comparisons) given."""

from __future__ import annotations

import argparse
import errno
from pathlib import Path

from lmlab.commands.parsing import add_command, add_device_argument

MAX_PORT = 65535


def add_serve_command(commands: argparse._SubParsersAction) -> None:
    serve = add_command(commands, "serve", handler=serve_command,
                        help="a local web page (and JSON API) to try runs in a browser")
    serve.add_argument("runs", nargs="+", type=Path, metavar="RUN",
                       help="run directories to serve, and comparison directories whose reports "
                       "to show; the page addresses them by name")
    serve.add_argument("--port", type=int, default=8000, help="the port to listen on")
    serve.add_argument("--host", default="127.0.0.1",
                       help="the address to listen on; the default reaches this machine only")
    serve.add_argument("--max-generations", type=int, default=2,
                       help="generations streamed at once; more are refused until one ends")
    add_device_argument(serve)


def serve_command(args: argparse.Namespace) -> int:
    from lmlab.kernels.machine import threads_for
    from lmlab.runs.run import usable_device
    from lmlab.serve.runs import RunTable
    from lmlab.serve.server import PlaygroundServer

    if args.max_generations < 1:
        raise ValueError(f"--max-generations must be at least 1, got {args.max_generations}")
    if not 0 <= args.port <= MAX_PORT:
        raise ValueError(f"--port must be between 0 (any free port) and {MAX_PORT}, "
                         f"got {args.port}")
    runs = RunTable.load(args.runs, usable_device(args.device))
    try:
        server = PlaygroundServer(runs, args.host, args.port, args.max_generations)
    except OSError as error:
        if error.errno == errno.EADDRINUSE:
            raise ValueError(f"port {args.port} on {args.host} is in use; pick another, such "
                             f"as --port {args.port + 1}") from None
        raise ValueError(f"cannot listen on {args.host} port {args.port}: "
                         f"{error.strerror or error}") from None
    names = ", ".join([served.name for served in runs.served]
                      + [comparison.name for comparison in runs.comparisons])
    print(f"serving {names} at {server.url} (Ctrl-C to stop)", flush=True)
    # Each request reads one prompt or a few texts: one CPU thread each, as for the CLI's
    # commands, and concurrent requests spread over the cores.
    with threads_for(1), server:
        server.serve_forever()
    return 0
