"""Local link shorteners: host names such as ``bit.ly`` mapped to loopback test servers.

:class:`HostMapDownloadHandler` is :class:`tests.redirect_server.SpyDownloadHandler` (every
host asked for is logged, anything not loopback refused before a socket exists) that first
sends the hosts named in ``$HOST_MAP`` (JSON: host -> loopback port) to that port, as a DNS
override would. :class:`HangingServer` accepts connections and never answers: a shortener
that is down in the worst way.
"""

from __future__ import annotations

import json
import os
import socket
import threading
from urllib.parse import urlsplit, urlunsplit

from scrapy import Request
from scrapy.core.downloader.handlers.http11 import HTTP11DownloadHandler
from scrapy.http import Response

from tests.redirect_server import SPY_LOG_ENV, SpyDownloadHandler

HOST_MAP_ENV = "HOST_MAP"
HANDLERS = json.dumps(
    {scheme: f"{__name__}.HostMapDownloadHandler" for scheme in ("http", "https")}
)


class HostMapDownloadHandler(SpyDownloadHandler):
    async def download_request(self, request: Request) -> Response:
        parts = urlsplit(request.url)
        port = json.loads(os.environ.get(HOST_MAP_ENV, "{}")).get(parts.hostname or "")
        if port is None:
            return await super().download_request(request)
        with open(os.environ[SPY_LOG_ENV], "a", encoding="utf-8") as log:
            log.write(f"{parts.hostname}\t{request.url}\n")
        local = urlunsplit(("http", f"127.0.0.1:{port}", parts.path, parts.query, ""))
        response = await HTTP11DownloadHandler.download_request(self, request.replace(url=local))
        return response.replace(url=request.url)


class HangingServer:
    """A loopback port that accepts connections and never answers; counts them."""

    def __init__(self) -> None:
        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        self._socket.listen(16)
        self.connections: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)

    @property
    def port(self) -> int:
        return self._socket.getsockname()[1]

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self._socket.accept()
            except OSError:
                return
            self.connections.append(connection)

    def __enter__(self) -> HangingServer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._socket.close()
        for connection in self.connections:
            connection.close()
