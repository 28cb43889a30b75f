"""The anchor for ``bench/site.sh``: plain Scrapy on the same messy site, as most people run it.

A ``CrawlSpider`` with Scrapy's default ``LinkExtractor`` and default settings (16 concurrent
requests, Scrapy's own dupefilter and redirect handling), none of this project's code:

    bench/site.sh SEED anchor
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

from scrapy.http import Response
from scrapy.linkextractors import LinkExtractor
from scrapy.spiders import CrawlSpider, Rule


class PlainSiteSpider(CrawlSpider):
    name = "plain"
    rules = (Rule(LinkExtractor(), callback="parse_page", follow=True),)

    def __init__(self, start_url: str, **kwargs: Any) -> None:
        self.start_urls = [start_url]
        self.allowed_domains = [urlsplit(start_url).hostname or ""]
        super().__init__(**kwargs)

    def parse_page(self, response: Response) -> Iterator[dict[str, Any]]:
        yield {"url": response.url, "status": response.status}
