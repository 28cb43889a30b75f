"""Links already seen are dropped as the spider yields them (``SeenLinksMiddleware``),
before Scrapy's own spider middlewares spend anything on them, and what those middlewares
do to new links does not change: same Referer, same depth and depth limit, same URL-length
drops, same offsite counts as plain Scrapy and as the add-on without the early drop."""

from __future__ import annotations

import doctest
import json
import os
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from scrapy import Request, Spider, signals
from scrapy.core.engine import ExecutionEngine
from scrapy.exceptions import NotConfigured
from scrapy.http import HtmlResponse
from scrapy.utils.test import get_crawler

import bloom_frontier.defaults as project_defaults
from bloom_frontier.frontier import META_KEY, known
from bloom_frontier.frontier.known import KnownKeys
from bloom_frontier.middlewares.linkbatch import BatchDedupeMiddleware, SeenLinksMiddleware
from bloom_frontier.services import CrawlServices, services_of
from tests.httpserver import TestServer, html

ROOT = Path(__file__).resolve().parent.parent
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

#: A middleware for between Scrapy's own and the link batch: counts the requests that got
#: that far.
COUNTING = """
import json
import scrapy
from scrapy import signals


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
"""

#: A plain Scrapy spider, :data:`COUNTING` beside it; at the end the stats the comparison
#: needs go to a file.
SPIDER = (
    COUNTING
    + """

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
)


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
             'ADDONS={"bloom_frontier.Addon": 0}']  # fmt: skip
    counting = {"spider.CountingMiddleware": 600}
    early_off = {**counting, "bloom_frontier.middlewares.linkbatch.SeenLinksMiddleware": None}
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


#: Between Scrapy's spider middlewares and the link batch, in the ``site`` spider's crawl:
#: counts the requests that got that far, writes the crawl's stats at the end.
PAST_SCRAPY = (
    COUNTING
    + """

class StatsToFile(CountingMiddleware):
    def __init__(self, crawler):
        super().__init__(crawler)
        crawler.signals.connect(self.closed, signal=signals.spider_closed)

    def closed(self, spider):
        with open(self.crawler.settings["TEST_STATS_FILE"], "w") as out:
            json.dump(self.crawler.stats.get_stats(), out, default=str)
"""
)

#: A page repeating its new links (``/b``'s first spelling is too long for
#: ``URLLENGTH_LIMIT``: the short one after it must still be followed).
REPEATS = {
    "/": html("/a", "/a", "/a?utm_source=x", "/b?utm_source=" + "x" * 80, "/b", "/c", "/a"),
    "/a": html("/", "/c", "/c"),
    "/b": html(),
    "/c": html(),
}


@pytest.mark.parametrize("mode", ["embedded", "shared"])
def test_a_pages_repeats_of_a_new_link_get_one_request_and_the_same_verdicts(
    tmp_path: Path, mode: str, request: pytest.FixtureRequest
) -> None:
    (tmp_path / "past_scrapy.py").write_text(textwrap.dedent(PAST_SCRAPY))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    shared = ["-s", f"REDIS_URL={request.getfixturevalue('redis_url')}"] if mode == "shared" else []
    runs = {}
    for name, early in (("early", 1010), ("without", None)):
        middlewares = {"past_scrapy.StatsToFile": 600}
        middlewares["bloom_frontier.middlewares.linkbatch.SeenLinksMiddleware"] = early
        stats_file = tmp_path / f"{name}.json"
        with TestServer(REPEATS) as server:
            result = subprocess.run(
                [sys.executable, "-m", "scrapy.cmdline", "crawl", "site",
                 "-a", f"start_url={server.url}/", "-s", "URLLENGTH_LIMIT=80",
                 "-s", f"SPIDER_MIDDLEWARES={json.dumps(middlewares)}",
                 "-s", f"TEST_STATS_FILE={stats_file}", "-s", f"FRONTIER_KEY_PREFIX={{{name}}}",
                 "-s", f"STORE_URL=sqlite:///{tmp_path / name}.sqlite", *shared],
                cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
            )  # fmt: skip
            assert result.returncode == 0, result.stderr[-3000:]
            hits = Counter(path for path in server.paths() if path != "/robots.txt")
        runs[name] = hits, json.loads(stats_file.read_text())
    (hits, stats), (hits_without, stats_without) = runs["early"], runs["without"]
    assert hits == hits_without == Counter({"/": 1, "/a": 1, "/b": 1, "/c": 1})
    # One request per new key reached the batch: /a, /b (after its long spelling), /c.
    assert stats["test/past_scrapy_middlewares"] == 3
    assert stats_without["test/past_scrapy_middlewares"] > 3
    for stat in ("seen/duplicate", "seen/new", "urllength/request_ignored_count"):
        assert stats.get(stat) == stats_without.get(stat), stat


class LinksSpider(Spider):
    name = "links"

    def parse(self, response: Any) -> None:
        """Callback."""


def links_crawler(**settings: Any) -> Any:
    defaults = {name: getattr(project_defaults, name) for name in dir(project_defaults)}
    made = get_crawler(
        LinksSpider,
        {
            **{k: v for k, v in defaults.items() if k.isupper()},
            "ADDONS": {"bloom_frontier.Addon": 0},
            **settings,
        },
    )
    made.spider = LinksSpider.from_crawler(made)
    return made


@pytest.fixture
def crawler() -> Any:
    return links_crawler()


def test_seen_links_are_dropped_counted_and_reported_once_the_page_is_done(crawler: Any) -> None:
    frontier = services_of(crawler).frontier
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


def test_links_judged_by_url_get_no_request_when_seen_and_are_counted_the_same(
    crawler: Any,
) -> None:
    frontier = services_of(crawler).frontier
    frontier.admit(None, [Request("https://example.com/seen")])
    built: list[str] = []

    def request_for(url: str) -> Request:
        built.append(url)
        return Request(url)

    middleware = SeenLinksMiddleware.from_crawler(crawler)
    urls = [
        "https://example.com/seen",
        "https://EXAMPLE.com/seen?utm_source=x",  # same key
        "https://example.com/new",
        "http://a..b/",  # no key: passed on, the batch rejects it with its reason
        "https://example.com/caf\u00e9",  # keyed as Scrapy spells its request's URL
    ]
    passed = list(middleware.requests_for(urls, request_for))
    assert [request.url for request in passed] == [
        "https://example.com/new",
        "http://a..b/",
        "https://example.com/caf%C3%A9",
    ]
    assert built == urls[2:]  # no Request for the seen ones: nobody listens for drops
    assert crawler.stats.get_value("seen/duplicate") == 2
    assert crawler.stats.get_value("dupefilter/filtered") == 2
    assert passed[0].meta[META_KEY] == frontier.keyer.key_of(Request("https://example.com/new"))
    frontier.admit(None, passed)

    dropped: list[str] = []

    def on_dropped(request: Request, spider: Spider) -> None:
        dropped.append(request.url)

    crawler.signals.connect(on_dropped, signal=signals.request_dropped)  # held weakly
    again = list(middleware.requests_for(urls[2:3] + urls[4:], request_for))
    assert again == []
    assert dropped == ["https://example.com/new", "https://example.com/caf%C3%A9"]
    assert crawler.stats.get_value("seen/duplicate") == 4


def test_a_repeat_is_dropped_only_once_its_first_request_is_in_the_batch(
    crawler: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    services = services_of(crawler)
    batch_middleware, batch = BatchDedupeMiddleware(crawler, services), []
    seen = SeenLinksMiddleware(crawler, services)
    seen.batch = batch_middleware
    keyer = services.frontier.keyer
    learned = {"https://example.com/learned?v=2"}  # a key a learned rule made
    monkeypatch.setattr(keyer, "link_merged_by_learned", lambda url, key: url in learned)
    urls = [
        "https://example.com/a",
        "https://example.com/a?utm_source=x",  # same key, its first held: dropped
        "https://example.com/b",  # a middleware below drops it (not held)
        "https://example.com/b?utm_source=x",  # so this one goes on, and is held
        "https://example.com/b",  # dropped
        "https://example.com/learned?v=1",
        "https://example.com/learned?v=2",  # same key, made by a learned rule: goes on
    ]
    monkeypatch.setattr(keyer, "link_key", lambda url: url.split("?")[0])
    passed = []
    for request in seen.requests_for(urls, Request):
        passed.append(request.url)
        if request.url != "https://example.com/b":
            batch_middleware._holds(request, batch)
    assert passed == [urls[0], urls[2], urls[3], urls[5], urls[6]]
    assert crawler.stats.get_value("seen/duplicate") == 2
    # Once the page's batch is admitted, its requests are no longer held.
    batch_middleware._admit(HtmlResponse(urls[0], body=b"", request=Request(urls[0])), batch)
    assert not batch_middleware.held


class ProjectMiddleware:
    """A project's spider middleware."""


class SwitchedOffMiddleware:
    @classmethod
    def from_crawler(cls, crawler: Any) -> SwitchedOffMiddleware:
        raise NotConfigured


def offered_early(**settings: Any) -> bool:
    """Whether a crawl with ``settings`` offers its spider the seen-links middleware
    (:attr:`CrawlServices.seen_links`), once its engine (with its real spider middleware
    chain) is built and its spider opened."""
    made = links_crawler(**settings)
    made.engine = ExecutionEngine(made, lambda _: None)
    made.signals.send_catch_log(signal=signals.spider_opened, spider=made.spider)
    seen = made.get_spider_middleware(SeenLinksMiddleware)
    services = made.get_extension(CrawlServices)
    return seen is not None and services.seen_links is seen


def test_links_are_judged_early_only_with_nothing_unknown_above_the_middleware() -> None:
    assert offered_early()  # the learned-rule re-check above it is served
    assert offered_early(CANON_LEARN="off")
    # A project middleware above it would not see the links dropped before their requests.
    assert not offered_early(SPIDER_MIDDLEWARES={ProjectMiddleware: 1100})
    assert offered_early(SPIDER_MIDDLEWARES={ProjectMiddleware: 600})  # below: sees them
    assert offered_early(SPIDER_MIDDLEWARES={SwitchedOffMiddleware: 1100})  # not installed
    assert not offered_early(SPIDER_MIDDLEWARES={SeenLinksMiddleware: None})


def test_known_keys_stay_bounded_forgetting_the_oldest_half() -> None:
    assert doctest.testmod(known).failed == 0
    keys = KnownKeys(capacity=1000)
    keys.update(f"k{i}" for i in range(10_000))
    remembered = [f"k{i}" for i in range(10_000) if f"k{i}" in keys]
    assert 500 <= len(remembered) <= 1000
    assert remembered == [f"k{i}" for i in range(10_000 - len(remembered), 10_000)]
