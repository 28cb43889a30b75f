"""Spiders shaped like users' own, for tests that run ``scrapy crawl`` on them
(``-s SPIDER_MODULES=tests.user_spiders``): a ``CrawlSpider`` with Scrapy's default
``LinkExtractor``, and a plain spider whose callback is not ``parse``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

from scrapy import Request, Spider
from scrapy.http import Response
from scrapy.linkextractors import LinkExtractor
from scrapy.spiders import CrawlSpider, Rule


class LinkCrawlSpider(CrawlSpider):
    """Every link on the start URL's host, one item per page from the rule's callback."""

    name = "user_crawl"
    rules = (Rule(LinkExtractor(), callback="parse_item", follow=True),)

    def __init__(self, start_url: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.start_urls = [start_url]

    def parse_item(self, response: Response) -> Iterator[dict[str, Any]]:
        yield {"url": response.url, "callback": "parse_item"}


class PageSpider(Spider):
    """No ``parse``: every page goes to ``parse_page``."""

    name = "user_pages"

    def __init__(self, start_url: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.start_urls = [start_url]

    async def start(self) -> AsyncIterator[Request]:
        yield Request(self.start_urls[0], callback=self.parse_page)

    def parse_page(self, response: Response) -> Iterator[Request | dict[str, Any]]:
        yield {"url": response.url, "callback": "parse_page"}
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse_page)
