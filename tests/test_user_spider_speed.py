"""A user's own CrawlSpider under the add-on: the memoized ``LinkExtractor`` gives Scrapy's
links (real pages of the Python docs, generated HTML), and dropping seen links before their
requests are built changes nothing the spider observes (its items, ``request_dropped``
signals, depth, Referer), on a real crawl, embedded and shared."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scrapy.http import HtmlResponse
from scrapy.linkextractors import LinkExtractor as ScrapyLinkExtractor

from bloom_frontier.frontier.keys import RequestKeyer
from bloom_frontier.links import LinkExtractor
from bloom_frontier.userspiders import link_key
from tests.httpserver import Page, TestServer
from tests.redirect_server import scrapy

DOCS = Path("/usr/share/doc/python3.11/html")

#: Extractor options a user's rule may have (each compared with Scrapy's on the same pages).
OPTIONS: list[dict[str, Any]] = [
    {},
    {"unique": False},
    {"canonicalize": True},
    {"allow": r"/library/", "deny": r"#"},
    {"deny_domains": ["www.python.org"], "deny_extensions": ["html"]},
    {"allow_domains": ["127.0.0.1"], "restrict_css": "div.body"},
    {"restrict_xpaths": "//div[@class='sphinxsidebar']", "restrict_text": r"[A-Z]"},
    {"tags": ("a", "link"), "attrs": ("href", "rel")},
    {"tags": ("a",), "deny_tags": ("area",), "strip": False},
    {"process_value": lambda value: value.upper()},  # Scrapy's own code
]


def as_tuples(links: list[Any]) -> list[tuple[str, str, str, bool, type]]:
    return [(link.url, link.text, link.fragment, link.nofollow, type(link)) for link in links]


def docs_responses(step: int) -> list[HtmlResponse]:
    pages = sorted(DOCS.rglob("*.html"))[::step]
    return [
        HtmlResponse(f"http://127.0.0.1:8000/{page.relative_to(DOCS)}", body=page.read_bytes())
        for page in pages
    ]


@pytest.mark.skipif(not DOCS.exists(), reason="apt-get install -y python3.11-doc")
@pytest.mark.parametrize("options", OPTIONS, ids=lambda options: ",".join(options) or "default")
def test_the_memoized_extractor_gives_scrapys_links_on_the_python_docs(
    options: dict[str, Any],
) -> None:
    responses = docs_responses(step=7)
    scrapy_extractor, fast = ScrapyLinkExtractor(**options), LinkExtractor(**options)
    for response in responses:
        expected = as_tuples(scrapy_extractor.extract_links(response))
        assert as_tuples(fast.extract_links(response)) == expected, response.url
    # Every link from memory the second time round: the same again.
    for response in responses[:20]:
        expected = as_tuples(scrapy_extractor.extract_links(response))
        assert as_tuples(fast.extract_links(response)) == expected, response.url


HREF_PARTS = st.sampled_from(
    [
        "a", "b.html", "../", "./", "..", ".", "/", "//", "//other.example", "http://",
        "https://", "HTTP://", "http:", "mailto:x@y", "javascript:void(0)", "#", "#top",
        "#a b", "?", "?q=1", "&", ";p", ":", "%", "%41", "%zz", " ", "\t", "\n", "\x0c",
        "\x01", "é", "€", "[::1]", "@", "~", "x" * 3, "#frag#again", "data:,x",
    ]
)  # fmt: skip
HREFS = st.lists(HREF_PARTS, min_size=0, max_size=5).map("".join)
PAGE_URLS = st.sampled_from(
    [
        "http://example.com/",
        "http://example.com/dir/page.html",
        "http://example.com/dir/sub/",
        "https://example.com/dir/page.html?x=1#f",
        "http://example.com",
        "http://example.com/dir/page;params",
        "https://other.example:8443/a/b/c",
    ]
)
BASES = st.one_of(st.none(), HREFS, PAGE_URLS)
#: One extractor for every example: its memory spans pages, directories and schemes.
SHARED = LinkExtractor(unique=False)


def page_html(hrefs: list[str], base: str | None) -> str:
    head = "" if base is None else f'<base href="{base}">'
    anchors = "".join(
        f'<a href="{href}" rel="{"nofollow" if i % 3 == 0 else ""}">t<b>{i}</b></a>'
        f'<area href="{href}"><a>{i}</a>'
        for i, href in enumerate(hrefs)
    )
    return f"<html><head>{head}</head><body>{anchors}</body></html>"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pages=st.lists(
        st.tuples(
            PAGE_URLS, BASES, st.lists(HREFS, max_size=8), st.sampled_from(["utf-8", "cp1252"])
        ),
        min_size=1,
        max_size=4,
    )
)
def test_the_memoized_extractor_gives_scrapys_links_on_generated_html(
    pages: list[tuple[str, str | None, list[str], str]],
) -> None:
    for url, base, hrefs, encoding in pages:
        body = page_html(hrefs, base).encode(encoding, errors="xmlcharrefreplace")
        response = HtmlResponse(url, body=body, encoding=encoding)
        for extractor in (ScrapyLinkExtractor(), ScrapyLinkExtractor(unique=False)):
            fast = SHARED if not extractor.link_extractor.unique else LinkExtractor()
            assert outcome(fast, response) == outcome(extractor, response), (url, base, hrefs)


def outcome(extractor: ScrapyLinkExtractor, response: HtmlResponse) -> object:
    """The links ``extractor`` gives, or the error it raises (a base URL w3lib refuses)."""
    try:
        return as_tuples(extractor.extract_links(response))
    except ValueError as error:
        return repr(error)


# --- a real crawl ------------------------------------------------------------------------

SECTIONS = ("a", "b")
#: Pages 0-11 of a section are in its navigation; page 12 only one page deeper than 11.
PAGE_NUMBERS = {str(n) for n in range(13)}


def site_page(path: str) -> Page | None:
    """A site of 2 sections x 13 pages, each linking to 12 pages of both (navigation:
    almost every link seen), twice, with a fragment the second time, and to the next page
    (the 13th only from the 12th); one link off the site and one too long for
    ``URLLENGTH_LIMIT``; a footer repeating navigation links (one with another text, one
    twice)."""
    if path == "/robots.txt":
        return None
    parts = path.strip("/").split("/")
    if path != "/" and (
        len(parts) != 2 or parts[0] not in SECTIONS or parts[1] not in PAGE_NUMBERS
    ):
        return None
    nav = "".join(
        f'<a href="/{section}/{n}">{section} {n}</a><a href="../{section}/{n}#top">again</a>'
        for section in SECTIONS
        for n in range(12)
    )
    deeper = f'<a href="{int(parts[1]) + 1}">next</a>' if len(parts) == 2 else ""
    extra = '<a href="http://offsite.example/x">off</a><a href="/a/' + "x" * 150 + '">long</a>'
    footer = '<a href="/a/0">a 0</a><a href="/b/0">b zero</a><a href="/a/1">a 1</a>' * 2
    return Page(
        f'<html><body><div class="nav">{nav}</div>{deeper}{extra}'
        f'<div class="footer">{footer}</div></body></html>'
    )


def crawl(
    tmp_path: Path, name: str, spider: str, start: str, *settings_args: str
) -> dict[str, Any]:
    """Crawl with ``spider`` (of ``tests.speed_spiders``); what it observed and the stats."""
    items, dropped = tmp_path / f"{name}.jsonl", tmp_path / f"{name}-dropped.json"
    result = scrapy(
        "crawl", spider, "-a", f"start_url={start}", "-a", f"dropped={dropped}",
        "-s", "SPIDER_MODULES=tests.speed_spiders",
        "-s", f"STORE_URL=sqlite:///{tmp_path / name}.sqlite",
        "-s", "URLLENGTH_LIMIT=120", "-s", "DEPTH_STATS_VERBOSE=True",
        "-s", "CONTENT_FINGERPRINTS_ENABLED=False",
        "-O", f"{items}:jsonlines", *settings_args,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    stats = {
        key: int(value)
        for key, value in (
            line.strip().strip(",").split(": ", 1)
            for line in result.stderr.splitlines()
            if line.startswith(" '") and ": " in line
        )
        if value.strip(",").isdigit()
    }
    return {
        "items": sorted(
            json.dumps(json.loads(line), sort_keys=True) for line in items.read_text().splitlines()
        ),
        "dropped": Counter(
            json.dumps(row, sort_keys=True) for row in json.loads(dropped.read_text())
        ),
        "stats": {key.strip("'"): value for key, value in stats.items()},
        "log": result.stderr,
    }


OBSERVED_STATS = (
    "seen/duplicate", "dupefilter/filtered", "offsite/filtered", "urllength/request_ignored_count",
    "request_depth_max", "item_scraped_count", "downloader/request_count",
    *(f"request_depth_count/{depth}" for depth in range(8)),
)  # fmt: skip


@pytest.mark.parametrize("spider", ["speed_rules", "speed_one_rule", "speed_rules_repeats"])
@pytest.mark.parametrize("shared", [False, True], ids=["embedded", "shared"])
def test_seen_links_dropped_before_their_requests_change_nothing_the_spider_sees(
    tmp_path: Path, shared: bool, spider: str, request: pytest.FixtureRequest
) -> None:
    extra = ["-s", f"REDIS_URL={request.getfixturevalue('redis_url')}"] if shared else []
    off = ["-s", 'EXTENSIONS={"bloom_frontier.userspiders.CrawlSpiderLinks": null}']
    with TestServer({"/*": site_page}) as server:
        fast = crawl(tmp_path, "fast", spider, f"{server.url}/", *extra)
        if shared:  # the second crawl starts afresh too
            with request.getfixturevalue("redis_bloom_server").client() as client:
                client.flushall()
        slow = crawl(tmp_path, "slow", spider, f"{server.url}/", *extra, *off)
    rules = {"speed_rules": 2, "speed_one_rule": 1, "speed_rules_repeats": 3}[spider]
    assert (
        f"{rules} of {rules} rules with the memoized LinkExtractor; links certainly seen dropped"
        in (fast["log"])
    )
    assert "memoized LinkExtractor" not in slow["log"]
    assert fast["items"] == slow["items"]
    assert len(fast["items"]) == 2 * 13  # every page once (the start page has no item)
    assert fast["dropped"] == slow["dropped"]
    assert fast["stats"]["dupefilter/filtered"] > 1000  # the navigation, found seen
    for name in OBSERVED_STATS:
        assert fast["stats"].get(name) == slow["stats"].get(name), name


# --- keys of links with a fragment --------------------------------------------------------

#: One keyer for every example (its memo spans them, as a crawl's does).
KEYER = RequestKeyer(stats=None)  # type: ignore[arg-type]


@pytest.mark.skipif(not DOCS.exists(), reason="apt-get install -y python3.11-doc")
def test_a_links_key_is_asked_without_its_fragment_only_when_it_is_the_same() -> None:
    urls = {
        link.url
        for response in docs_responses(step=7)
        for link in ScrapyLinkExtractor(unique=False).extract_links(response)
    }
    assert sum("#" in url for url in urls) > 1000
    fresh = RequestKeyer(stats=None)  # type: ignore[arg-type]
    for url in sorted(urls):
        assert link_key(KEYER, url) == fresh.link_key(url), url


@settings(max_examples=400, deadline=None)
@given(base=PAGE_URLS, href=HREFS, fragment=HREFS)
def test_the_key_without_a_plain_fragment_is_the_links_key(
    base: str, href: str, fragment: str
) -> None:
    try:
        url = urljoin(base, href) + "#" + fragment
    except ValueError:
        return
    assert link_key(KEYER, url) == RequestKeyer(stats=None).link_key(url), url  # type: ignore[arg-type]
