"""``site``: a generic spider that crawls one site (or a few hosts) by following its links."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import urlsplit

from lxml import etree
from scrapy import Request, Spider
from scrapy.http import Response, TextResponse
from twisted.internet.threads import deferToThread

from bloom_frontier.canonical import resolve_link
from bloom_frontier.canonical.resolve import RESOLVED_LINKS, LinkResolver
from bloom_frontier.frontier.bounded import over_page_cap
from bloom_frontier.meta import DEDUPE_KEY_META
from bloom_frontier.services import CrawlServices
from bloom_frontier.shorteners import Shorteners, shorteners_from_settings

if TYPE_CHECKING:
    from bloom_frontier.services import SeenLinks

#: Elements whose ``href`` is a link to follow.
LINK_TAGS = ("a", "area")
LINK_XPATH = "//a/@href | //area/@href"
BASE_XPATH = "//base[@href][1]/@href"
#: How many links of each tag a page has (counted only past ``PAGE_MAX_LINKS``; a union
#: of the two costs twice as much).
_COUNT_LINKS = {tag: etree.XPath(f"count(//{tag}[@href])") for tag in LINK_TAGS}


def page_tree(response: TextResponse) -> Any:
    """The lxml tree Scrapy parsed for ``response``, or None if it has none (not HTML/XML)."""
    selector = response.selector
    if selector.type not in ("html", "xml") or not hasattr(selector.root, "iter"):
        return None
    return selector.root


def page_links(response: TextResponse, limit: int = 0) -> tuple[list[str], bool]:
    """The ``href`` values of the page's ``<a>`` and ``<area>`` elements, in document order
    (what ``response.xpath(LINK_XPATH).getall()`` gives), the first ``limit`` of them (0:
    all), and whether the page has more. Read off the lxml tree Scrapy parsed, element by
    element, without a parsel ``Selector`` per value and without reading past ``limit``: a
    page of a million links costs what its first ``limit`` cost."""
    root = page_tree(response)
    if root is None:
        hrefs = response.xpath(LINK_XPATH).getall()
        return (hrefs[:limit], True) if limit and len(hrefs) > limit else (hrefs, False)
    hrefs = []
    for element in root.iter(*LINK_TAGS):
        href = element.get("href")
        if href is None:
            continue
        if len(hrefs) == limit and limit:
            return hrefs, True
        hrefs.append(href)
    return hrefs, False


def count_links(response: TextResponse) -> int:
    """How many ``<a href>`` and ``<area href>`` the page has (in C: a second for a million;
    a crawl asks in a thread)."""
    root = page_tree(response)
    if root is None:
        return len(response.xpath(LINK_XPATH))
    # lxml answers at once for a tag name the document never uses.
    tags = [tag for tag in LINK_TAGS if next(root.iter(tag), None) is not None]
    return sum(int(_COUNT_LINKS[tag](root)) for tag in tags)


def _base_href(response: TextResponse) -> str | None:
    """The ``href`` of the page's first ``<base href>`` (:data:`BASE_XPATH`), if any."""
    root = page_tree(response)
    if root is None:
        found = response.xpath(BASE_XPATH).getall()
        return found[0] if found else None
    for element in root.iter("base"):  # at once when the page has no <base>
        href = element.get("href")
        if href is not None:
            return href  # type: ignore[no-any-return]
    return None


def page_base(response: TextResponse) -> str:
    """The URL a page's relative links resolve against: its first ``<base href>``, itself
    resolved against the response's final URL, or that URL when there is none (or it is junk).
    """
    base_href = _base_href(response)
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


class SpiderArgumentError(ValueError):
    """A spider argument (``-a``) is missing or not one the spider can use; the message
    names it and what is allowed."""


class SiteSpider(Spider):
    """Crawl everything reachable from ``start_url`` on its host.

    Arguments (``-a``): ``start_url`` (required); ``hosts``, a comma-separated list of more
    host names to follow links to. Each page yields one item (URL, status, dedupe key) and
    a request per link; junk links (``javascript:``, ``mailto:``, ...) are counted under
    ``links/junk``, links to other hosts under ``links/offsite``.
    """

    name = "site"
    #: The only methods a stored request may name as its callback or errback
    #: (``bloom_frontier.frontier.decode.spider_method``): not ``is_short_link`` & co.
    stored_callbacks: ClassVar[frozenset[str]] = frozenset({"parse"})

    @classmethod
    def check_arguments(cls, start_url: str | None = None, **arguments: str) -> None:
        """:class:`SpiderArgumentError` naming what is wrong with the spider's ``-a``
        arguments; ``scrapy crawl`` calls it before the engine starts (a spider's
        ``__init__`` fails inside the running crawl, with a traceback)."""
        if not start_url:
            problem = "start_url is required"
        elif resolve_link(start_url, start_url) is None:
            problem = f"start_url={start_url!r} is not an absolute http:// or https:// URL"
        else:
            return
        raise SpiderArgumentError(
            f"{problem} (usage: scrapy crawl {cls.name} -a start_url=https://example.com/ "
            "[-a hosts=other.example.com,...])"
        )

    def __init__(self, start_url: str | None = None, hosts: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.check_arguments(start_url=start_url)
        assert start_url is not None
        self.start_url = start_url
        extra = {host.strip().lower() for host in hosts.split(",") if host.strip()}
        self.allowed_hosts = frozenset({host_of(start_url), *extra})
        self._resolver = LinkResolver()
        self._verdicts: dict[str, bool] = {}
        self._verdicts_for: frozenset[str] | None = None

    async def start(self) -> AsyncIterator[Request]:
        yield Request(self.start_url, callback=self.parse)

    def parse(self, response: Response) -> Iterator[Request | dict[str, Any]]:
        yield {
            "url": response.url,
            "status": response.status,
            "dedupe_key": response.meta.get(DEDUPE_KEY_META),
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
        bloom_frontier.middlewares.shorteners) although the host is not the crawl's."""
        return self._shorteners is not None and self._shorteners.host_of(url) is not None

    def follow_links(self, response: TextResponse) -> Iterator[Request]:
        """Requests for the page's links that stay on the allowed hosts. Links the crawl
        has certainly seen are dropped before a ``Request`` is built for them, when the
        crawl's seen-links middleware allows
        (:attr:`~bloom_frontier.services.CrawlServices.seen_links`): they are counted the
        same."""
        urls = self.followed_urls(response)
        early = self._seen_links()
        if early is None:
            yield from map(self.request_for, urls)
        else:
            yield from early.requests_for(urls, self.request_for)

    def _seen_links(self) -> SeenLinks | None:
        """What the crawl's services offer to drop seen links early (None without them, or
        before the crawler has its extensions)."""
        try:
            services = self.crawler.get_extension(CrawlServices)
        except RuntimeError:
            return None
        return services.seen_links if services is not None else None

    def request_for(self, url: str) -> Request:
        """The request for a link the spider follows. A GET for ``url``, not
        ``dont_filter``: a link is judged seen by its URL before this is called."""
        return Request(url, callback=self.parse)

    def followed_urls(self, response: TextResponse) -> Iterator[str]:
        """The URLs of the page's links that stay on the allowed hosts (counted:
        ``links/extracted``, ``links/junk``, ``links/offsite``), among its first
        ``PAGE_MAX_LINKS`` links (the others unread, :meth:`_count_over_cap`). Resolved and
        judged once per link, not once per page that has it
        (:class:`~bloom_frontier.canonical.resolve.LinkResolver`, :meth:`follows`)."""
        base = page_base(response)
        stats = self.crawler.stats
        hrefs, more = page_links(response, self.settings.getint("PAGE_MAX_LINKS"))
        stats.inc_value("links/extracted", len(hrefs))
        if more:
            self._count_over_cap(response, len(hrefs))
        junk = offsite = 0
        verdicts = self._verdicts_now()
        try:
            for url in self._resolver.resolve(base, hrefs):
                if url is None:
                    junk += 1
                    continue
                follow = verdicts.get(url)
                if follow is None:
                    follow = verdicts[url] = self.follows(url)
                if follow:
                    yield url
                else:
                    offsite += 1
        finally:
            if junk:
                stats.inc_value("links/junk", junk)
            if offsite:
                stats.inc_value("links/offsite", offsite)

    def _count_over_cap(self, response: TextResponse, taken: int) -> None:
        """Count the links of ``response`` past the ``taken`` ones (``PAGE_MAX_LINKS``) in a
        thread, off Twisted's loop, then :func:`over_page_cap`: a page's links are read
        from its tree no more meanwhile (the ones taken are strings by then)."""
        stats = self.crawler.stats
        counting = deferToThread(count_links, response)
        counting.addCallback(lambda total: over_page_cap(stats, response, taken, total - taken))
        counting.addErrback(
            lambda failure: self.logger.error(
                "Cannot count the links of %s: %s", response.url[:200], failure.value
            )
        )

    def follows(self, url: str) -> bool:
        """True if the link ``url`` stays on the allowed hosts (or is a short link to
        follow)."""
        return host_of(url) in self.allowed_hosts or self.is_short_link(url)

    def _verdicts_now(self) -> dict[str, bool]:
        """:meth:`follows` remembered per URL, while :attr:`allowed_hosts` stays the same."""
        if self._verdicts_for is not self.allowed_hosts or len(self._verdicts) >= RESOLVED_LINKS:
            self._verdicts = {}
            self._verdicts_for = self.allowed_hosts
        return self._verdicts
