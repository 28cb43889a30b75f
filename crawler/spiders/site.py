"""``site``: a generic spider that crawls one site (or a few hosts) by following its links."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from functools import cached_property, lru_cache
from typing import Any
from urllib.parse import urlsplit

from lxml import etree
from scrapy import Request, Spider
from scrapy.http import Response, TextResponse

from crawler.canonical import resolve_link
from crawler.shorteners import Shorteners, shorteners_from_settings
from middlewares.linkbatch import early_seen_links

#: Elements whose ``href`` is a link to follow.
LINK_XPATH = "//a/@href | //area/@href"
BASE_XPATH = "//base[@href][1]/@href"
_COMPILED = {query: etree.XPath(query, smart_strings=False) for query in (LINK_XPATH, BASE_XPATH)}


def page_strings(response: TextResponse, query: str) -> list[str]:
    """The strings (attribute values) XPath ``query`` (:data:`LINK_XPATH` or
    :data:`BASE_XPATH`) selects in the page: what ``response.xpath(query).getall()`` gives,
    read off the lxml tree Scrapy parsed without a parsel ``Selector`` per value (a page of
    the Python docs has ~290 links)."""
    selector = response.selector
    root = selector.root
    if selector.type not in ("html", "xml") or not hasattr(root, "xpath"):
        return response.xpath(query).getall()
    return _COMPILED[query](root)  # type: ignore[no-any-return]


def page_base(response: TextResponse) -> str:
    """The URL a page's relative links resolve against: its first ``<base href>``, itself
    resolved against the response's final URL, or that URL when there is none (or it is junk).
    """
    found = page_strings(response, BASE_XPATH)
    base_href = found[0] if found else None
    if base_href is not None:
        base = resolve_link(response.url, base_href)
        if base is not None:
            return base
    return response.url


def host_of(url: str) -> str:
    """Lowercased host name of ``url`` ('' when it has none).

    >>> host_of("https://User@WWW.Example.com.:8080/a?b#c"), host_of("mailto:a@b.c")
    ('www.example.com', '')
    """
    scheme, sep, rest = url.partition("://")
    if not sep or "/" in scheme or not url.isprintable() or url[:1] == " ":
        return (urlsplit(url).hostname or "").rstrip(".")
    return _authority_host(_AUTHORITY.match(rest).group())  # type: ignore[union-attr]


_AUTHORITY = re.compile(r"[^/?#]*")


@lru_cache(maxsize=1024)
def _authority_host(authority: str) -> str:
    """The host of an authority, as ``urlsplit`` reads it; cached: a page's links share a
    few authorities."""
    return (urlsplit(f"//{authority}").hostname or "").rstrip(".")


class SiteSpider(Spider):
    """Crawl everything reachable from ``start_url`` on its host.

    Arguments (``-a``): ``start_url`` (required); ``hosts``, a comma-separated list of more
    host names to follow links to. Each page yields one item (URL, status, dedupe key) and
    a request per link; junk links (``javascript:``, ``mailto:``, ...) are counted under
    ``links/junk``, links to other hosts under ``links/offsite``.
    """

    name = "site"

    def __init__(self, start_url: str | None = None, hosts: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not start_url or resolve_link(start_url, start_url) is None:
            raise ValueError(
                "usage: scrapy crawl site -a start_url=https://example.com/ "
                f"[-a hosts=other.example.com,...] (got start_url={start_url!r})"
            )
        self.start_url = start_url
        extra = {host.strip().lower() for host in hosts.split(",") if host.strip()}
        self.allowed_hosts = frozenset({host_of(start_url), *extra})

    async def start(self) -> AsyncIterator[Request]:
        yield Request(self.start_url, callback=self.parse)

    def parse(self, response: Response) -> Iterator[Request | dict[str, Any]]:
        yield {
            "url": response.url,
            "status": response.status,
            "dedupe_key": response.meta.get("dedupe_key"),
        }
        if not isinstance(response, TextResponse):
            return
        yield from self.follow_links(response)

    @cached_property
    def _shorteners(self) -> Shorteners | None:
        if not self.settings.getbool("SHORTENERS_ENABLED"):
            return None
        return shorteners_from_settings(self.settings)

    def is_short_link(self, url: str) -> bool:
        """A link to a shortener host, followed to learn its target (SHORTENERS_ENABLED,
        middlewares.shorteners) although the host is not the crawl's."""
        return self._shorteners is not None and self._shorteners.host_of(url) is not None

    def follow_links(self, response: TextResponse) -> Iterator[Request]:
        """Requests for the page's links that stay on the allowed hosts. Links the crawl
        has certainly seen are dropped before a ``Request`` is built for them, when the
        crawl's :class:`~middlewares.linkbatch.SeenLinksMiddleware` allows
        (:func:`~middlewares.linkbatch.early_seen_links`): they are counted the same."""
        urls = self.followed_urls(response)
        early = early_seen_links(self.crawler)
        if early is None:
            yield from map(self.request_for, urls)
        else:
            yield from early.requests_for(urls, self.request_for)

    def request_for(self, url: str) -> Request:
        """The request for a link the spider follows. A GET for ``url``, not
        ``dont_filter``: a link is judged seen by its URL before this is called."""
        return Request(url, callback=self.parse)

    def followed_urls(self, response: TextResponse) -> Iterator[str]:
        """The URLs of the page's links that stay on the allowed hosts (counted:
        ``links/extracted``, ``links/junk``, ``links/offsite``)."""
        base = page_base(response)
        stats = self.crawler.stats
        hrefs = page_strings(response, LINK_XPATH)
        stats.inc_value("links/extracted", len(hrefs))
        for href in hrefs:
            url = resolve_link(base, href)
            if url is None:
                stats.inc_value("links/junk")
            elif host_of(url) not in self.allowed_hosts and not self.is_short_link(url):
                stats.inc_value("links/offsite")
            else:
                yield url
