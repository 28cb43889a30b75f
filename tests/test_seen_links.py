"""Links already seen are dropped as the spider yields them (``SeenLinksMiddleware``),
before Scrapy's own spider middlewares spend anything on them, and what those middlewares
do to new links does not change: same Referer, same depth and depth limit, same URL-length
drops, same offsite counts as plain Scrapy and as the add-on without the early drop."""

from __future__ import annotations

import doctest
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from scrapy import Request, Spider, signals
from scrapy.http import HtmlResponse
from scrapy.utils.test import get_crawler

import crawler.defaults as project_defaults
from crawler.frontier import META_KEY, frontier_for, known
from crawler.frontier.known import KnownKeys
from middlewares.linkbatch import SeenLinksMiddleware
from tests.httpserver import TestServer, html

LONG = "/" + "long" * 20  # past URLLENGTH_LIMIT below
#: No link back to the start page: plain Scrapy fetches it again (its start request is
#: ``dont_filter``, so its fingerprint is never recorded), the frontier does not.
SITE = {
    "/": html("/a", "/b", "/a", "http://offsite.example/x", LONG),
    "/a": html("/a/1", "/a/2", "/a", "/b", "http://offsite.example/x"),
    "/b": html("/b/1", "/a", "/b"),
    "/a/1": html("/a/1/deep", "/a", "/a/2"),
    "/a/2": html("/a/1", "/b"),
    "/b/1": html("/b/1/deep", "/b"),
    "/a/1/deep": html(),  # depth 3: past DEPTH_LIMIT
    "/b/1/deep": html(),
    LONG: html(),
}

#: A plain Scrapy spider; a middleware between Scrapy's own and the link batch counts the
#: requests that got that far; at the end the stats the comparison needs go to a file.
SPIDER = """
import json
import scrapy


class CountingMiddleware:
    def __init__(self, crawler):
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler):
        return cls(crawler)

    async def process_spider_output(self, response, result):
        async for output in result:
            if isinstance(output, scrapy.Request):
                self.crawler.stats.inc_value("test/past_scrapy_middlewares")
            yield output


class LinksSpider(scrapy.Spider):
    name = "links"
    allowed_domains = ["127.0.0.1"]

    def __init__(self, start, out, **kwargs):
        super().__init__(**kwargs)
        self.start_urls = [start]
        self.out = out

    def parse(self, response):
        referer = response.request.headers.get("Referer")
        yield {
            "url": response.url,
            "referer": referer.decode() if referer else None,
            "depth": response.meta.get("depth"),
        }
        for href in response.xpath("//a/@href").getall():
            yield response.follow(href, callback=self.parse)

    def closed(self, reason):
        with open(self.out, "w") as out:
            json.dump({k: v for k, v in self.crawler.stats.get_stats().items()
                       if isinstance(v, int)}, out)
"""


def crawl(server: TestServer, tmp: Path, name: str, *settings: str) -> tuple[list, dict]:
    """Run the spider outside the project (no scrapy.cfg); its items and stats."""
    workdir = tmp / name
    workdir.mkdir()
    (workdir / "spider.py").write_text(textwrap.dedent(SPIDER))
    items, stats = workdir / "items.jsonl", workdir / "stats.json"
    command = [
        sys.executable, "-m", "scrapy.cmdline", "runspider", "spider.py",
        "-a", f"start={server.url}/", "-a", f"out={stats}", "-o", str(items),
        "-s", "DEPTH_LIMIT=2", "-s", "URLLENGTH_LIMIT=80", "-s", "CONCURRENT_REQUESTS=1",
        "-s", "ROBOTSTXT_OBEY=False", "-s", "LOG_LEVEL=INFO", *settings,
    ]  # fmt: skip
    result = subprocess.run(
        command, cwd=workdir, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = items.read_text().splitlines()
    return sorted(json.loads(line).items() for line in lines), json.loads(stats.read_text())


def test_new_links_get_the_same_referer_depth_and_length_verdicts(tmp_path: Path) -> None:
    addon = ["-s", "STORE_URL=sqlite:///store.sqlite", "-s",
             'ADDONS={"crawler.addon.BloomFrontierAddon": 0}']  # fmt: skip
    counting = {"spider.CountingMiddleware": 600}
    early_off = {**counting, "middlewares.linkbatch.SeenLinksMiddleware": None}
    runs = {}
    with TestServer(SITE) as server:
        for name, settings, middlewares in (
            ("plain", [], counting),
            ("addon", addon, counting),
            ("without", addon, early_off),
        ):
            middlewares_setting = f"SPIDER_MIDDLEWARES={json.dumps(middlewares)}"
            runs[name] = crawl(server, tmp_path, name, *settings, "-s", middlewares_setting)
    plain_items, plain_stats = runs["plain"]
    fetched = {urlsplit(dict(item)["url"]).path for item in plain_items}
    assert fetched == {"/", "/a", "/b", "/a/1", "/a/2", "/b/1"}  # not the deep ones, not LONG
    for name in ("addon", "without"):
        items, stats = runs[name]
        assert items == plain_items, name  # same pages, each with the same Referer and depth
        for stat in (
            "urllength/request_ignored_count",
            "request_depth_max",
            "offsite/filtered",
            "offsite/domains",
        ):
            assert stats.get(stat) == plain_stats.get(stat), (name, stat)
    addon_stats, without_stats = runs["addon"][1], runs["without"][1]
    for stat in ("seen/new", "offsite/filtered", "offsite/domains"):
        assert addon_stats.get(stat) == without_stats.get(stat), stat
    # Duplicates past the depth limit (the 5 links of the depth-2 pages to pages already
    # seen) are counted as duplicates when dropped early; DepthMiddleware drops them
    # uncounted when it sees them first.
    assert addon_stats["seen/duplicate"] == without_stats["seen/duplicate"] + 5
    assert addon_stats["dupefilter/filtered"] == addon_stats["seen/duplicate"]
    # The point: duplicates stopped before Scrapy's middlewares (and the one above the batch).
    past = "test/past_scrapy_middlewares"
    assert addon_stats[past] < without_stats[past] == plain_stats[past]


class LinksSpider(Spider):
    name = "links"

    def parse(self, response: Any) -> None:
        """Callback."""


@pytest.fixture
def crawler() -> Any:
    settings = {name: getattr(project_defaults, name) for name in dir(project_defaults)}
    made = get_crawler(LinksSpider, {k: v for k, v in settings.items() if k.isupper()})
    made.spider = LinksSpider.from_crawler(made)
    return made


def test_seen_links_are_dropped_counted_and_reported_once_the_page_is_done(crawler: Any) -> None:
    frontier = frontier_for(crawler)
    frontier.admit(None, [Request("https://example.com/seen")])
    dropped: list[str] = []

    def on_dropped(request: Request, spider: Spider) -> None:
        dropped.append(request.url)

    crawler.signals.connect(on_dropped, signal=signals.request_dropped)  # held weakly
    response = HtmlResponse(
        "https://example.com/", body=b"", request=Request("https://example.com/")
    )
    yielded = [
        {"item": 1},
        Request("https://example.com/seen"),
        Request("https://EXAMPLE.com/seen?utm_source=x"),  # same key
        Request("https://example.com/new"),
        Request("https://example.com/seen", dont_filter=True),
        Request("http://a..b/"),  # no key: the batch rejects it, with its reason
    ]
    middleware = SeenLinksMiddleware.from_crawler(crawler)
    output = middleware.process_spider_output(response, iter(yielded))
    passed = [next(output), next(output)]
    assert dropped == []  # reported when the page is done
    passed += list(output)
    assert passed == [yielded[0], yielded[3], yielded[4], yielded[5]]
    assert dropped == ["https://example.com/seen", "https://example.com/seen?utm_source=x"]
    assert crawler.stats.get_value("seen/duplicate") == 2
    assert crawler.stats.get_value("dupefilter/filtered") == 2
    assert yielded[3].meta[META_KEY]  # keyed once, carried to the batch
    # What the batch does with the links that need checking (dont_filter ones pass it).
    admitted = frontier.admit(response.request, [yielded[3], yielded[5]])
    assert [request.url for request in admitted] == ["https://example.com/new"]
    assert crawler.stats.get_value("dupefilter/invalid/bad-host") == 1
    # The batch marked /new: the next page's link to it is dropped early.
    again = list(
        middleware.process_spider_output(response, iter([Request("https://example.com/new")]))
    )
    assert again == []


def test_known_keys_stay_bounded_forgetting_the_oldest_half() -> None:
    assert doctest.testmod(known).failed == 0
    keys = KnownKeys(capacity=1000)
    keys.update(f"k{i}" for i in range(10_000))
    remembered = [f"k{i}" for i in range(10_000) if f"k{i}" in keys]
    assert 500 <= len(remembered) <= 1000
    assert remembered == [f"k{i}" for i in range(10_000 - len(remembered), 10_000)]
