"""A tiny threaded HTTP server on a free loopback port, for tests that crawl a real site.

Routes map a path (with query) to a :class:`Page` or to a function of the request path that
returns one; every request is logged (path and time), so tests can check what a crawler
actually fetched, from the server's side. It runs in the test process (``with
TestServer(...)``) while the crawler under test may run in a subprocess.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass(frozen=True)
class Page:
    #: Text (sent as UTF-8) or bytes sent as they are (a gzip-encoded body).
    body: str | bytes = ""
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    content_type: str = "text/html; charset=utf-8"


def html(*links: str, head: str = "", title: str = "") -> Page:
    """An HTML page with one ``<a>`` per link and optional extra ``<head>`` markup."""
    anchors = "\n".join(f'<a href="{link}">{link}</a>' for link in links)
    return Page(f"<html><head><title>{title}</title>{head}</head><body>{anchors}</body></html>")


def redirect(location: str, status: int = 301) -> Page:
    return Page(status=status, headers={"Location": location})


Route = Page | Callable[[str], Page | None]


@dataclass(frozen=True)
class Hit:
    path: str
    time: float
    user_agent: str = ""


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        """A crawler killed mid-download breaks its connections: expected, not an error."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class TestServer:
    """Serves ``routes`` on ``http://<host>:<port>`` (``host``: a loopback address, default
    127.0.0.1; each of 127.0.0.0/8 is a host of its own to a crawler); unknown paths get 404.

        ``delay`` seconds are slept before each answer (to make crawls take time).
        ``/robots.txt`` allows everything unless a route says otherwise.
        :attr:`most_at_once` is the most requests it was answering at one time.
    """

    __test__ = False  # not a pytest class

    def __init__(
        self, routes: Mapping[str, Route], delay: float = 0.0, host: str = "127.0.0.1"
    ) -> None:
        self.routes = dict(routes)
        self.delay = delay
        self.host = host
        self.hits: list[Hit] = []
        self.most_at_once = 0
        self._answering = 0
        self._lock = threading.Lock()
        self._server = _QuietServer((host, 0), self._handler_class())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def paths(self) -> list[str]:
        with self._lock:
            return [hit.path for hit in self.hits]

    def page_for(self, path: str) -> Page | None:
        route = self.routes.get(path)
        if route is None and "/*" in self.routes:
            route = self.routes["/*"]
        if callable(route):
            return route(path)
        if route is None and path == "/robots.txt":
            return Page("User-agent: *\nAllow: /\n", content_type="text/plain")
        return route

    def __enter__(self) -> TestServer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                agent = self.headers.get("User-Agent", "")
                with server._lock:
                    server.hits.append(Hit(self.path, time.time(), agent))
                    server._answering += 1
                    server.most_at_once = max(server.most_at_once, server._answering)
                try:
                    self._answer()
                finally:
                    with server._lock:
                        server._answering -= 1

            def _answer(self) -> None:
                if server.delay:
                    time.sleep(server.delay)
                page = server.page_for(self.path)
                if page is None:
                    page = Page("not found", status=404, content_type="text/plain")
                body = page.body if isinstance(page.body, bytes) else page.body.encode()
                self.send_response(page.status)
                self.send_header("Content-Type", page.content_type)
                self.send_header("Content-Length", str(len(body)))
                for name, value in page.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)
                self.wfile.flush()

            def log_message(self, format: str, *args: object) -> None:
                """Quiet: the hit list is the log."""

        return Handler
