"""The HTTP server: the page's files and the JSON API, on the standard library.

Requests reach runs and comparison reports only through the RunTable (by name) and files only
through the fixed table of static assets, so no part of a request path names anything on disk.
"""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from urllib.parse import parse_qs, unquote, urlsplit

from lmlab.serve import features, generation
from lmlab.serve.errors import ApiError
from lmlab.serve.runs import RunTable

MAX_BODY = 1 << 20  # bytes
# An oversized body up to this size is read and dropped before the 413, so that a client still
# sending it reads the answer instead of a reset connection; a larger one is cut off.
MAX_DRAINED = 64 * MAX_BODY
STATIC = {"/": ("index.html", "text/html"), "/app.js": ("app.js", "text/javascript"),
          "/style.css": ("style.css", "text/css"),
          # the page names favicon.svg; /favicon.ico is where a browser looks without it
          "/favicon.svg": ("favicon.svg", "image/svg+xml"),
          "/favicon.ico": ("favicon.svg", "image/svg+xml")}
# POST endpoints answered whole: path → function(served run, body) → JSON answer.
ANSWERS = {"/api/fill-mask": features.fill_mask, "/api/embed": features.embed,
           "/api/predict": features.predict, "/api/attention": features.attention}
DISCONNECTED = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)


class PlaygroundServer(ThreadingHTTPServer):
    daemon_threads = True  # an open stream never holds up shutdown

    def __init__(self, runs: RunTable, host: str = "127.0.0.1", port: int = 8000,
                 max_generations: int = 2) -> None:
        self.runs = runs
        self.slots = generation.Slots(max_generations)
        super().__init__((host, port), Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"


class Handler(BaseHTTPRequestHandler):
    server: PlaygroundServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args) -> None:
        pass  # one line per request would drown the terminal while a page polls

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        try:
            if url.path in STATIC:
                name, kind = STATIC[url.path]
                content = resources.files("lmlab.serve").joinpath("static", name).read_bytes()
                self._send(200, content, f"{kind}; charset=utf-8")
            elif url.path == "/api/runs":
                self._json(200, self.server.runs.describe())
            elif url.path.startswith("/report/"):
                comparison = self.server.runs.comparison(unquote(url.path[len("/report/"):]))
                self._send(200, comparison.report(), "text/html; charset=utf-8")
            elif url.path == "/api/metrics":
                query = parse_qs(url.query)
                served = self.server.runs.get(query.get("run", [""])[0])
                after = query.get("after", ["0"])[0]
                if not after.isdigit():
                    raise ApiError(400, "'after' must be a row number")
                self._json(200, features.metrics(served, int(after)))
            else:
                raise ApiError(404, f"no such page or endpoint: {url.path}")
        except ApiError as error:
            self._error(error)

    def do_POST(self) -> None:
        path = urlsplit(self.path).path
        try:
            if path != "/api/generate" and path not in ANSWERS:
                raise ApiError(404, f"no such endpoint: {path}")
            body = self._body()
            served = self.server.runs.get(body.get("run", 0))
            if path == "/api/generate":
                self._generate(served, body)
            else:
                self._json(200, _answer(ANSWERS[path], served, body))
        except ApiError as error:
            self._error(error)

    def _body(self) -> dict:
        length = self.headers.get("Content-Length", "0")
        if not length.isdigit():
            raise ApiError(400, "the request needs a Content-Length")
        if int(length) > MAX_BODY:
            self.close_connection = True
            left = min(int(length), MAX_DRAINED)
            while left > 0 and (chunk := self.rfile.read(min(left, 1 << 16))):
                left -= len(chunk)
            raise ApiError(413, f"the request body is {int(length)} bytes; the most "
                           f"accepted is {MAX_BODY}")
        try:
            body = json.loads(self.rfile.read(int(length)) or b"{}")
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise ApiError(400, f"the request body is not JSON: {error}") from None
        if not isinstance(body, dict):
            raise ApiError(400, "the request body must be a JSON object")
        return body

    def _generate(self, served, body: dict) -> None:
        slots = self.server.slots
        slots.take()
        cancelled = False
        try:
            events = _answer(generation.events, served, body)
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            try:
                for event in events:
                    self._event("token", event)
                self._event("done", {})
            except DISCONNECTED:
                cancelled = True
            finally:
                events.close()
        finally:
            slots.give_back(cancelled)

    def _event(self, name: str, data: dict) -> None:
        self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
        self.wfile.flush()

    def _json(self, status: int, answer) -> None:
        self._send(status, json.dumps(answer).encode(), "application/json")

    def _error(self, error: ApiError) -> None:
        self._json(error.status, {"error": error.message})

    def _send(self, status: int, content: bytes, kind: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(content)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(content)


def _answer(function, served, body: dict):
    """`function`'s answer; what the library refuses (a run that cannot fill masks, options
    out of range) is the client's to fix: 422 with the library's own reason."""
    try:
        return function(served, body)
    except ApiError:
        raise
    except ValueError as error:
        raise ApiError(422, str(error).splitlines()[0]) from None
