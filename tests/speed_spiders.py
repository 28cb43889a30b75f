"""Users' spiders for ``tests/test_user_spider_speed.py`` (``-s
SPIDER_MODULES=tests.speed_spiders``): each writes what it observed (its items go to ``-O``;
the ``request_dropped`` signals it received, with each request's URL, callback, rule and
link text, to ``-a dropped=PATH``) so two crawls can be compared."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from scrapy import Request, Spider, signals
from scrapy.crawler import Crawler
from scrapy.http import Response
from scrapy.linkextractors import LinkExtractor
from scrapy.spiders import CrawlSpider, Rule


class _Observed:
    """Records the ``request_dropped`` signals of the crawl to ``self.dropped_path``."""

    dropped_path: Path
    dropped_requests: list[dict[str, Any]]

    def observe(self, crawler: Crawler, dropped: str) -> None:
        self.dropped_path, self.dropped_requests = Path(dropped), []
        crawler.signals.connect(self.request_dropped, signal=signals.request_dropped)
        crawler.signals.connect(self.write_observed, signal=signals.spider_closed)

    def request_dropped(self, request: Request) -> None:
        callback = getattr(request.callback, "__name__", None)
        self.dropped_requests.append(
            {
                "url": request.url,
                "callback": callback,
                "rule": request.meta.get("rule"),
                "link_text": request.meta.get("link_text"),
                "referer": request.headers.get("Referer", b"").decode(),
            }
        )

    def write_observed(self) -> None:
        self.dropped_path.write_text(json.dumps(self.dropped_requests))


class TwoRulesSpider(_Observed, CrawlSpider):
    """Two rules over the same links: pages under ``/a/`` to ``parse_item``, every link
    followed by the second rule too (CrawlSpider follows a page's link once)."""

    name = "speed_rules"
    rules = (
        Rule(LinkExtractor(allow=r"/a/"), callback="parse_item", follow=True),
        Rule(LinkExtractor(), callback="parse_other", follow=True),
    )

    def __init__(self, start_url: str, dropped: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.start_urls = [start_url]
        self.allowed_domains = [urlsplit(start_url).hostname or ""]
        self._dropped_arg = dropped

    @classmethod
    def from_crawler(cls, crawler: Crawler, *args: Any, **kwargs: Any) -> TwoRulesSpider:
        spider = super().from_crawler(crawler, *args, **kwargs)
        spider.observe(crawler, spider._dropped_arg)
        return spider

    def parse_item(self, response: Response) -> Iterator[dict[str, Any]]:
        yield {
            "url": response.url,
            "callback": "parse_item",
            "depth": response.meta["depth"],
            "text": response.meta.get("link_text"),
            "referer": response.request.headers.get("Referer", b"").decode(),
        }

    def parse_other(self, response: Response) -> Iterator[dict[str, Any]]:
        yield {
            "url": response.url,
            "callback": "parse_other",
            "depth": response.meta["depth"],
            "text": response.meta.get("link_text"),
            "referer": response.request.headers.get("Referer", b"").decode(),
        }


class OneRuleSpider(TwoRulesSpider):
    """The most common shape: one rule, every link followed to ``parse_item``."""

    name = "speed_one_rule"
    rules = (Rule(LinkExtractor(), callback="parse_item", follow=True),)


class RepeatingRulesSpider(TwoRulesSpider):
    """Rules over parts of the page that repeat each other's links: the footer's copies
    of navigation links (by another element: the same ``Link`` but for ``b zero``), each
    twice (``unique=False``: CrawlSpider follows a rule's own repeats), then every link."""

    name = "speed_rules_repeats"
    rules = (
        Rule(LinkExtractor(restrict_css="div.nav"), callback="parse_item", follow=True),
        Rule(
            LinkExtractor(restrict_css="div.footer", unique=False),
            callback="parse_other",
            follow=True,
        ),
        Rule(LinkExtractor(), callback="parse_other", follow=True),
    )


class FollowAllSpider(_Observed, Spider):
    """A plain spider following every ``<a>`` with ``response.follow_all(css="a")``."""

    name = "speed_follow_all"

    def __init__(self, start_url: str, dropped: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.start_urls = [start_url]
        self.allowed_domains = [urlsplit(start_url).hostname or ""]
        self._dropped_arg = dropped

    @classmethod
    def from_crawler(cls, crawler: Crawler, *args: Any, **kwargs: Any) -> FollowAllSpider:
        spider = super().from_crawler(crawler, *args, **kwargs)
        spider.observe(crawler, spider._dropped_arg)
        return spider

    def parse(self, response: Response) -> Iterator[Request | dict[str, Any]]:
        yield {
            "url": response.url,
            "callback": "parse",
            "depth": response.meta["depth"],
            "referer": response.request.headers.get("Referer", b"").decode(),
        }
        yield from response.follow_all(css="a")
