"""rel=canonical hints: the verdict rules, then a real crawl and ``scrapy canonicals``."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from scrapy import Request, Spider
from scrapy.http import HtmlResponse, Response
from scrapy.http.request import NO_CALLBACK
from scrapy.utils.test import get_crawler

from bloom_frontier.middlewares.canonical_hints import (
    SOURCE_ELEMENT,
    SOURCE_HEADER,
    CanonicalHintsMiddleware,
    judge_hints,
    link_header_canonicals,
    page_number,
    site_of,
)
from bloom_frontier.middlewares.redirects import key_or_error
from bloom_frontier.pipelines.reader import StoreReader
from tests.httpserver import TestServer, html
from tests.redirect_server import Crawl, command_rows, run_crawl, scrapy, spy_hosts

PAGE = "https://www.example.co.uk/docs/guide/intro.html"


def verdicts(page: str, *hrefs: str, base: str | None = None) -> list[tuple[bool, str]]:
    hints = [(SOURCE_ELEMENT, href, base or page) for href in hrefs]
    return [(h.valid, h.reason) for h in judge_hints(page, key_or_error(page)[0], hints)]


@pytest.mark.parametrize(
    ("href", "valid", "reason"),
    [
        ("intro.html", True, "self"),
        ("/docs/guide/intro.html?utm_source=feed", True, "self"),
        ("HTTPS://WWW.EXAMPLE.CO.UK/docs/./guide/intro.html", True, "self"),
        ("/docs/guide/", True, "same-site"),
        ("https://static.example.co.uk/docs/intro.html", True, "same-site"),
        ("http://www.example.co.uk/docs/guide/intro.html", True, "same-site"),
        ("https://www.other.co.uk/docs/guide/intro.html", False, "cross-site"),
        ("https://example.com/docs/guide/intro.html", False, "cross-site"),
        ("https://co.uk/", False, "cross-site"),
        ("/", False, "homepage-from-deep-page"),
        ("https://www.example.co.uk/index.html", False, "homepage-from-deep-page"),
        ("file:///usr/share/doc/intro.html", False, "non-http-scheme"),
        ("javascript:void(0)", False, "non-http-scheme"),
        ("https://exa mple.co.uk/x", False, "invalid-url:bad-host"),
        ("http://a.example.co.uk:99999/", False, "invalid-url:bad-port"),
        ("http://", False, "invalid-url:bad-host"),
    ],
)
def test_single_hint_verdicts(href: str, valid: bool, reason: str) -> None:
    assert verdicts(PAGE, href) == [(valid, reason)]


def test_hint_resolves_against_base_href() -> None:
    hints = judge_hints(
        PAGE, None, [(SOURCE_ELEMENT, "target.html", "https://www.example.co.uk/b/")]
    )
    assert hints[0].canonical_url == "https://www.example.co.uk/b/target.html"


def test_conflicting_hints_are_all_rejected() -> None:
    assert verdicts(PAGE, "/a.html", "/b.html") == [(False, "conflicting"), (False, "conflicting")]


def test_the_same_value_twice_is_one_value() -> None:
    assert verdicts(PAGE, "/a.html", "/a.html?utm_medium=x") == [
        (True, "same-site"),
        (True, "same-site"),
    ]


def test_a_broken_hint_next_to_a_good_one_makes_both_invalid() -> None:
    assert verdicts(PAGE, "/a.html", "file:///a.html") == [
        (False, "conflicting"),
        (False, "non-http-scheme"),
    ]


def test_home_page_may_name_the_root() -> None:
    assert verdicts("https://example.org/index.html", "/") == [(True, "same-site")]


@pytest.mark.parametrize(
    ("page", "href", "verdict"),
    [
        ("https://example.org/list?page=3", "/list", (False, "paginated-to-first")),
        ("https://example.org/list?page=3", "/list?page=1", (False, "paginated-to-first")),
        ("https://example.org/blog/page/2/", "/blog/", (False, "paginated-to-first")),
        ("https://example.org/list?page=3", "/list?page=3&sort=new", (True, "same-site")),
        ("https://example.org/list?page=1", "/list", (True, "same-site")),
    ],
)
def test_series_pages_must_not_point_at_page_one(
    page: str, href: str, verdict: tuple[bool, str]
) -> None:
    assert verdicts(page, href) == [verdict]


def test_ip_hosts_are_their_own_site() -> None:
    assert site_of("127.0.0.1") == site_of("127.0.0.1.") != site_of("127.0.0.2")
    assert site_of("[::1]") == "::1"
    assert site_of("a.b.example.co.uk") == "example.co.uk"


def test_page_numbers() -> None:
    assert page_number("https://e.org/x?p=4") == 4
    assert page_number("https://e.org/news/page/12") == 12
    assert page_number("https://e.org/x?page=next") is None


def test_link_header_parsing() -> None:
    values = [
        b'<https://e.org/a>; rel="canonical", <https://e.org/b.pdf>; rel=alternate',
        b'<https://e.org/c>; type=text/html; rel="alternate canonical"',
        b"<https://e.org/d>; rel=canonicalish",
    ]
    assert link_header_canonicals(values) == ["https://e.org/a", "https://e.org/c"]


@pytest.fixture(scope="module")
def crawl(tmp_path_factory: pytest.TempPathFactory) -> Crawl:
    return run_crawl(tmp_path_factory.mktemp("canonicals"))


@pytest.fixture(scope="module")
def stored(crawl: Crawl) -> dict[tuple[str, str], dict]:
    store = StoreReader.from_url(crawl.store_url)
    hints = {(crawl.path(h["page_url"]), h["source"]): h for h in store.hints()}  # type: ignore[misc]
    store.close()
    return hints


@pytest.mark.parametrize(
    ("page", "canonical", "valid", "reason"),
    [
        ("/canon/self", "/canon/self", True, "self"),
        ("/canon/equivalent", "/canon/equivalent?utm_source=feed", True, "self"),
        ("/canon/relative", "/canon/base/target", True, "same-site"),
        ("/canon/cross", "https://example.org/canon/cross", False, "cross-site"),
        ("/canon/home", "/", False, "homepage-from-deep-page"),
        ("/canon/page?page=2", "/canon/page", False, "paginated-to-first"),
        ("/canon/file", "file:///usr/share/doc/python3/index.html", False, "non-http-scheme"),
    ],
)
def test_crawl_stores_each_hint_with_its_verdict(
    crawl: Crawl,
    stored: dict[tuple[str, str], dict],
    page: str,
    canonical: str,
    valid: bool,
    reason: str,
) -> None:
    hint = stored[(page, SOURCE_ELEMENT)]
    assert (crawl.path(hint["canonical_url"]), hint["valid"], hint["reason"]) == (
        canonical,
        valid,
        reason,
    )


def test_link_header_hint_is_followed(crawl: Crawl, stored: dict[tuple[str, str], dict]) -> None:
    hint = stored[("/canon/header", SOURCE_HEADER)]
    assert (crawl.path(hint["canonical_url"]), hint["reason"]) == (
        "/canon/header-target",
        "same-site",
    )
    # Linked from nowhere: fetched because the hint scheduled it.
    assert crawl.hits["/canon/header-target"] == 1
    assert crawl.hits["/canon/base/target"] == 1


def test_invalid_hints_are_not_followed(crawl: Crawl) -> None:
    assert set(spy_hosts(crawl.spy_log)) <= {"127.0.0.1", "localhost"}  # not example.org
    assert crawl.hits["/canon/page"] == 1  # linked from the start page, not re-fetched


def test_canonical_link_in_body_is_ignored(stored: dict[tuple[str, str], dict]) -> None:
    assert not [key for key in stored if key[0] == "/canon/body"]


def test_valid_hints_alias_the_page_key(crawl: Crawl) -> None:
    store = StoreReader.from_url(crawl.store_url)
    aliases = {
        (crawl.path(a["from_key"].partition("|")[2]), crawl.path(a["to_key"].partition("|")[2]))
        for a in store.key_aliases()
    }
    store.close()
    assert aliases == {
        ("/canon/relative", "/canon/base/target"),
        ("/canon/header", "/canon/header-target"),
    }


def test_canonicals_command(crawl: Crawl) -> None:
    rows = command_rows("canonicals", crawl.store_url)
    assert all(set(row) == {"page", "canonical", "valid", "reason", "problem"} for row in rows)
    by_page = {(crawl.path(row["page"]), crawl.path(row["canonical"])): row for row in rows}
    assert by_page[("/canon/self", "/canon/self")]["valid"] is True
    assert by_page[("/canon/cross", "https://example.org/canon/cross")]["valid"] is False
    conflicting = [row for row in rows if row["reason"] == "conflicting"]
    assert {crawl.path(row["canonical"]) for row in conflicting} == {
        "/canon/self",
        "/canon/relative",
    }
    valid_only = command_rows("canonicals", crawl.store_url, "--valid-only")
    assert valid_only == [row for row in rows if row["valid"]]


USER_SITE = {
    "/": html("/page"),
    # Its canonical is linked from nowhere: only the hint can have it fetched.
    "/page": html(head='<link rel="canonical" href="/canonical-page">'),
    "/canonical-page": html(),
}


@pytest.mark.parametrize(
    ("spider", "callback", "shared"),
    [
        ("user_crawl", "parse_item", False),
        ("user_crawl", "parse_item", True),  # the rule travels through Redis as JSON
        ("user_pages", "parse_page", False),
    ],
)
def test_canonical_page_goes_to_the_callback_of_the_page_that_named_it(
    tmp_path: Path, spider: str, callback: str, shared: bool, request: pytest.FixtureRequest
) -> None:
    items = tmp_path / "items.jsonl"
    shared_options = ["-s", f"REDIS_URL={request.getfixturevalue('redis_url')}"] if shared else []
    with TestServer(USER_SITE) as server:
        result = scrapy(
            "crawl", spider, "-a", f"start_url={server.url}/",
            "-s", "SPIDER_MODULES=tests.user_spiders",
            "-s", f"STORE_URL=sqlite:///{tmp_path / 'store.sqlite'}",
            "-O", f"{items}:jsonlines", *shared_options,
        )  # fmt: skip
        hits = Counter(server.paths())
    assert result.returncode == 0, result.stderr[-3000:]
    assert "NotImplementedError" not in result.stderr, result.stderr[-3000:]
    assert "spider_exceptions" not in result.stderr
    assert hits["/canonical-page"] == 1
    rows = [json.loads(line) for line in items.read_text().splitlines()]
    by_path = {row["url"].removeprefix(server.url): row["callback"] for row in rows}
    assert by_path["/page"] == by_path["/canonical-page"] == callback


class NoParseSpider(Spider):
    name = "no_parse"


class WithParseSpider(Spider):
    name = "with_parse"

    def parse(self, response: Response) -> None:
        """Scrapy's default callback, defined."""


@pytest.mark.parametrize(
    ("spider", "callback", "followed"),
    [
        (NoParseSpider, None, False),  # Scrapy would call a parse the spider lacks
        (NoParseSpider, NO_CALLBACK, False),  # an internal download
        (WithParseSpider, None, True),
    ],
)
def test_canonical_not_followed_from_a_page_without_a_callback(
    spider: type[Spider], callback: object, followed: bool
) -> None:
    crawler = get_crawler(spider, {"ADDONS": {"bloom_frontier.Addon": 0}})
    crawler.spider = spider.from_crawler(crawler)
    middleware = CanonicalHintsMiddleware.from_crawler(crawler)
    page = Request("https://e.org/page", callback=callback)  # type: ignore[arg-type]
    response = HtmlResponse(page.url, request=page, body=b"<html></html>")
    follow_up = middleware.follow_up(response, "https://e.org/canonical")
    assert (follow_up is not None) is followed
    if follow_up is not None:
        assert follow_up.callback is None and follow_up.meta["canonical_of"] == page.url
