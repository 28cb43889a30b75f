"""A plain ``scrapy.Spider`` yielding ``response.follow_all(css="a")`` under the add-on:
its responses' ``follow_all`` reads the same links as Scrapy's (the Python docs, generated
HTML), and dropping the seen ones before their requests are built changes nothing the spider
sees (items, depth, Referer, ``request_dropped``, the middlewares' counts), embedded and
shared."""

from __future__ import annotations

from contextlib import suppress
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scrapy.http import HtmlResponse
from scrapy.http.response.text import _InvalidSelector, _url_from_selector
from scrapy.utils.response import get_base_url

from bloom_frontier.followall import FollowAllResponses, query_hrefs
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
