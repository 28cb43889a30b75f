"""``failing``: a spider whose callback raises on every page, next to a middleware that
ignores some requests. Run with ``scrapy crawl failing -s SPIDER_MODULES=tests.spiders -a
start_url=...`` and :class:`IgnoringMiddleware` added to ``DOWNLOADER_MIDDLEWARES``: every
lease must be answered by what happens to its request.

- ``/raise-first/...`` pages: the callback raises before yielding anything;
- other pages: it yields the page's links, then raises;
- ``/ignored/...`` URLs: :class:`IgnoringMiddleware` raises ``IgnoreRequest`` in
  ``process_request``; ``/dropped/...``: it raises ``IgnoreRequest`` in
  ``process_response`` (where no other middleware sees it).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

from scrapy import Request, Spider
from scrapy.exceptions import IgnoreRequest
from scrapy.http import Response


class IgnoringMiddleware:
    def process_request(self, request: Request) -> None:
        if "/ignored/" in request.url:
            raise IgnoreRequest("ignored by the test's middleware")

    def process_response(self, request: Request, response: Response) -> Response:
        if "/dropped/" in request.url:
            raise IgnoreRequest("dropped by the test's middleware")
        return response


class FailingSpider(Spider):
    name = "failing"

    def __init__(self, start_url: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.start_url = start_url

    async def start(self) -> AsyncIterator[Request]:
        yield Request(self.start_url)

    def parse(self, response: Response) -> Iterator[Request]:
        if "/raise-first/" in response.url:
            raise ValueError(f"callback failed at once on {response.url}")
        for href in response.xpath("//a/@href").getall():
            yield response.follow(href)
        raise ValueError(f"callback failed after its links on {response.url}")
