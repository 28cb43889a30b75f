"""Download handlers that log every host they are asked to reach and refuse, before any
socket exists, every host but ``$SPY_ALLOW`` (default ``localhost``): Scrapy's HTTP/1.1
handler and its aiohttp handler, whose only SSRF guard is the downloader middleware (it
resolves names itself, past the guard's resolver).

Set in a crawl's ``DOWNLOAD_HANDLERS`` with :data:`HANDLERS`; the log is the file named by
``$SPY_LOG`` (read it with :func:`tests.redirect_server.spy_hosts`).
"""

from __future__ import annotations

import json
import os
from urllib.parse import urlsplit

from scrapy import Request
from scrapy.core.downloader.handlers._aiohttp import AiohttpDownloadHandler
from scrapy.core.downloader.handlers.http11 import HTTP11DownloadHandler
from scrapy.http import Response

from tests.redirect_server import SPY_LOG_ENV

SPY_ALLOW_ENV = "SPY_ALLOW"


def _spy(request: Request) -> None:
    host = urlsplit(request.url).hostname or ""
    with open(os.environ[SPY_LOG_ENV], "a", encoding="utf-8") as log:
        log.write(f"{host}\t{request.url[:200]}\n")
    if host not in os.environ.get(SPY_ALLOW_ENV, "localhost").split(","):
        raise ConnectionRefusedError(f"test spy: {host} is not allowed")


class SpyHttp11Handler(HTTP11DownloadHandler):
    """Scrapy's default HTTP handler behind the spy."""

    async def download_request(self, request: Request) -> Response:
        _spy(request)
        return await super().download_request(request)


class SpyAiohttpHandler(AiohttpDownloadHandler):
    """Scrapy's aiohttp handler behind the spy."""

    async def download_request(self, request: Request) -> Response:
        _spy(request)
        return await super().download_request(request)


#: ``DOWNLOAD_HANDLERS`` (JSON) for each spy, by the handler it wraps.
HANDLERS = {
    name: json.dumps({scheme: f"{__name__}.{cls.__name__}" for scheme in ("http", "https")})
    for name, cls in (("http11", SpyHttp11Handler), ("aiohttp", SpyAiohttpHandler))
}
