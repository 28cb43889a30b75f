"""Start requests go through the frontier like links: each start URL is fetched once.

Scrapy's default ``start()`` yields its ``start_urls`` with ``dont_filter=True``, which would
keep them out of the seen filter: the start page would be fetched again when a page links to
it, and once per worker of a shared frontier. :class:`StartRequestsMiddleware` lets those
requests through the dupefilter instead. A ``dont_filter`` start request a spider builds
itself (its own ``start()``, a URL not in ``start_urls``) keeps its ``dont_filter``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from scrapy import Request
from w3lib.url import safe_url_string

if TYPE_CHECKING:
    from typing import Self

    from scrapy import Spider
    from scrapy.crawler import Crawler


def filterable_start(request: Request, start_urls: frozenset[str]) -> Request:
    """``request`` with ``dont_filter`` off if it is one of ``start_urls`` (the flag came
    from Scrapy's default ``start()``), else ``request`` unchanged.

    >>> filterable_start(Request("https://a.example/", dont_filter=True),
    ...                  frozenset({"https://a.example/"})).dont_filter
    False
    """
    if request.dont_filter and request.url in start_urls:
        return request.replace(dont_filter=False)
    return request


class StartRequestsMiddleware:
    """Spider middleware (``process_start``): see the module docstring."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    async def process_start(self, start: AsyncIterator[Any]) -> AsyncIterator[Any]:
        spider: Spider | None = self.crawler.spider
        start_urls = frozenset(
            safe_url_string(url) for url in getattr(spider, "start_urls", None) or () if url
        )
        async for output in start:
            if isinstance(output, Request):
                output = filterable_start(output, start_urls)
            yield output
