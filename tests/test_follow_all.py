"""A plain ``scrapy.Spider`` yielding ``response.follow_all(css="a")`` under the add-on:
its responses' ``follow_all`` reads the same links as Scrapy's (the Python docs, generated
HTML), and dropping the seen ones before their requests are built changes nothing the spider
sees (items, depth, Referer, ``request_dropped``, the middlewares' counts), embedded and
shared."""

from __future__ import annotations

from contextlib import suppress
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import urljoin

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scrapy import Request, signals
from scrapy.http import HtmlResponse
from scrapy.http.response.text import _InvalidSelector, _url_from_selector
from scrapy.signalmanager import SignalManager
from scrapy.utils.response import get_base_url

from bloom_frontier.followall import FollowAllHtmlResponse, FollowAllResponses, query_hrefs
from bloom_frontier.frontier.keys import RequestKeyer
from bloom_frontier.links import LinkPage
from tests.httpserver import TestServer
from tests.test_user_spider_speed import (
    DOCS,
    HREFS,
    OBSERVED_STATS,
    PAGE_URLS,
    crawl,
    docs_responses,
    site_page,
)

#: ``follow_all`` queries a spider may use.
QUERIES: list[dict[str, str]] = [
    {"css": "a"},
    {"css": "a, link"},
    {"css": "div.body a::attr(href)"},
    {"css": "a::text"},
    {"css": "li > a.reference.internal"},
    {"xpath": "//a"},
    {"xpath": "//@href"},
    {"xpath": "count(//a)"},
    {"xpath": "//comment() | //a[@class] | //div"},
]


def scrapys_hrefs(response: HtmlResponse, query: dict[str, str]) -> list[str]:
    """What Scrapy's ``follow_all(**query)`` joins to the page's base URL (its own code)."""
    selectors = response.css(query["css"]) if "css" in query else response.xpath(query["xpath"])
    hrefs = []
    for selector in selectors:
        with suppress(_InvalidSelector):
            hrefs.append(_url_from_selector(selector))
    return hrefs


@pytest.mark.skipif(not DOCS.exists(), reason="apt-get install -y python3.11-doc")
@pytest.mark.parametrize("query", QUERIES, ids=lambda query: next(iter(query.values())))
def test_follow_all_reads_scrapys_links_and_urls_on_the_python_docs(
    query: dict[str, str],
) -> None:
    joins = FollowAllResponses(crawler=None)  # type: ignore[arg-type]
    for response in docs_responses(step=9):
        hrefs = query_hrefs(response, query.get("css"), query.get("xpath"))
        assert hrefs == scrapys_hrefs(response, query), response.url
        page = LinkPage(get_base_url(response), response.url, response.encoding)
        joined = [joins.join(page, href) for href in hrefs]
        assert joined == [response.urljoin(href) for href in hrefs], response.url


#: One memo for every example: its answers span pages, directories and schemes.
JOINS = FollowAllResponses(crawler=None)  # type: ignore[arg-type]


@settings(max_examples=400, deadline=None)
@given(
    base=st.one_of(PAGE_URLS, st.builds("{}{}".format, PAGE_URLS, HREFS)),
    hrefs=st.lists(HREFS, max_size=8),
)
def test_the_remembered_urljoin_is_urljoin(base: str, hrefs: list[str]) -> None:
    page = LinkPage(base, base, "utf-8")
    for href in hrefs:
        try:
            expected: Any = urljoin(base, href)
        except ValueError as error:
            expected = repr(error)
        try:
            got: Any = JOINS.join(page, href)
        except ValueError as error:
            got = repr(error)
        assert got == expected, (base, href)


@pytest.mark.parametrize("shared", [False, True], ids=["embedded", "shared"])
def test_seen_links_dropped_in_follow_all_change_nothing_the_spider_sees(
    tmp_path: Path, shared: bool, request: pytest.FixtureRequest
) -> None:
    extra = ["-s", f"REDIS_URL={request.getfixturevalue('redis_url')}"] if shared else []
    off = ["-s", 'DOWNLOADER_MIDDLEWARES={"bloom_frontier.followall.FollowAllResponses": null}']
    with TestServer({"/*": site_page}) as server:
        fast = crawl(tmp_path, "fast", "speed_follow_all", f"{server.url}/", *extra)
        if shared:  # the second crawl starts afresh too
            with request.getfixturevalue("redis_bloom_server").client() as client:
                client.flushall()
        slow = crawl(tmp_path, "slow", "speed_follow_all", f"{server.url}/", *extra, *off)
    message = "follow_all(css=...) drops links certainly seen before their requests are built"
    assert message in fast["log"]
    assert message not in slow["log"]
    assert fast["items"] == slow["items"]
    assert len(fast["items"]) == 1 + 2 * 13  # every page once
    assert fast["dropped"] == slow["dropped"]
    assert fast["stats"]["dupefilter/filtered"] > 1000  # the navigation, found seen
    for name in OBSERVED_STATS:
        assert fast["stats"].get(name) == slow["stats"].get(name), name


# --- the requests follow_all gives ------------------------------------------------------


class Stats(dict[str, int]):
    def inc_value(self, key: str, count: int = 1) -> None:
        self[key] = self.get(key, 0) + count


class Crawl:
    """What ``FollowAllResponses`` asks of a crawl: its services' frontier (the keys in
    ``seen`` certainly seen), its stats and signals; each ``request_dropped`` recorded."""

    def __init__(self, seen: set[str]) -> None:
        self.stats = Stats()
        self.signals = SignalManager()
        self.spider = None
        keyer = RequestKeyer(self.stats)  # type: ignore[arg-type]
        frontier = SimpleNamespace(keyer=keyer, seen_link=lambda url, key: key in seen)
        self.services = SimpleNamespace(seen_links=object(), frontier=frontier)
        self.dropped: list[Request] = []
        self.signals.connect(self.request_dropped, signal=signals.request_dropped)

    def request_dropped(self, request: Request) -> None:
        self.dropped.append(request)

    def get_extension(self, _: type) -> object:
        return self.services

    def get_spider_middleware(self, _: type) -> None:
        return None


def as_fields(request: Request) -> tuple[Any, ...]:
    return (
        request.url, request.method, request.headers.to_unicode_dict(), request.body,
        request.cookies, request.meta, request.encoding, request.priority,
        request.dont_filter, request.callback, request.errback, request.cb_kwargs,
        request.flags,
    )  # fmt: skip


def outcome(requests: Any) -> list[Any]:
    """Each request's fields as it comes, then the error that ended them, if any."""
    got: list[Any] = []
    try:
        for request in requests:
            got.append(as_fields(request))
    except ValueError as error:  # a mailto: link: Scrapy's Request refuses it
        got.append(repr(error))
    return got


def on_fast(response: HtmlResponse, crawl: Crawl) -> FollowAllHtmlResponse:
    fast = response.replace(cls=FollowAllHtmlResponse)
    fast._follow_all_by = FollowAllResponses(crawl)  # type: ignore[attr-defined, arg-type]
    return fast  # type: ignore[return-value]


def parse_page(response: Any) -> None: ...


def on_error(failure: Any) -> None: ...


#: ``follow_all`` arguments a spider may give: each request carries them all.
ARGUMENTS: list[dict[str, Any]] = [
    {"css": "a"},
    {"xpath": "//a | //link", "callback": parse_page, "errback": on_error, "priority": 3},
    {"css": "a::attr(href)", "meta": {"x": 1}, "cb_kwargs": {"y": 2}, "flags": ["f"]},
    {"css": "a", "headers": {"X-A": "1"}, "cookies": {"c": "1"}, "encoding": "latin-1"},
]
#: What Scrapy's own follow_all does, untouched (every link a request, seen or not).
SCRAPYS_OWN: list[dict[str, Any]] = [
    {"css": "a", "dont_filter": True},
    {"css": "a", "method": "POST"},
    {"css": "a", "body": "b"},
    {"urls": ["a.html", "/b.html#x", "../c"]},
    {"css": "a", "xpath": "//a"},
]


@pytest.mark.skipif(not DOCS.exists(), reason="apt-get install -y python3.11-doc")
@pytest.mark.parametrize("arguments", ARGUMENTS, ids=lambda arguments: ",".join(arguments))
def test_follow_all_gives_scrapys_requests_less_the_seen_reported_as_dropped(
    arguments: dict[str, Any],
) -> None:
    responses = docs_responses(step=37)
    keyer = RequestKeyer(Stats())  # type: ignore[arg-type]
    every = [outcome(HtmlResponse.follow_all(response, **arguments)) for response in responses]
    # Every other key certainly seen (a page's own links included).
    keys = sorted(
        {
            str(keyer.link_key(fields[0]))
            for page in every
            for fields in page
            if isinstance(fields, tuple)
        }
    )
    seen = set(keys[::2])
    crawl = Crawl(seen)
    for response, expected in zip(responses, every, strict=True):
        before = len(crawl.dropped)
        got = outcome(on_fast(response, crawl).follow_all(**arguments))
        dropped = [as_fields(request) for request in crawl.dropped[before:]]
        is_seen = [
            isinstance(fields, tuple) and keyer.link_key(fields[0]) in seen for fields in expected
        ]
        assert got == [fields for fields, drop in zip(expected, is_seen, strict=True) if not drop]
        assert dropped == [fields for fields, drop in zip(expected, is_seen, strict=True) if drop]
    assert crawl.stats["dupefilter/filtered"] == len(crawl.dropped) > 1000


@pytest.mark.skipif(not DOCS.exists(), reason="apt-get install -y python3.11-doc")
@pytest.mark.parametrize("arguments", SCRAPYS_OWN, ids=lambda arguments: ",".join(arguments))
def test_follow_all_is_scrapys_own_for_other_arguments(arguments: dict[str, Any]) -> None:
    response = docs_responses(step=37)[0]
    crawl = Crawl(set())
    crawl.services.frontier.seen_link = lambda url, key: True  # everything seen
    fast = on_fast(response, crawl)
    try:
        expected: Any = outcome(HtmlResponse.follow_all(response, **arguments))
    except ValueError as error:
        expected = repr(error)
    try:
        got: Any = outcome(fast.follow_all(**arguments))
    except ValueError as error:
        got = repr(error)
    assert got == expected
    assert not crawl.dropped
