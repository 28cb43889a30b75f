"""rel=canonical hints: read, validated, stored; a valid one aliases the page to its canonical.

A page names its canonical URL in ``<link rel="canonical" href>`` inside ``<head>`` (resolved
against ``<base href>``) and/or in an HTTP ``Link: <...>; rel="canonical"`` header (resolved
against the response URL, as RFC 8288 says). Sites get this wrong often enough that a hint
is only trusted (``valid``) when all of these hold; otherwise the ``reason`` says which failed:

* ``conflicting``: the page names more than one distinct canonical;
* ``non-http-scheme`` / ``unparseable`` / ``invalid-url:<reason>``: it is not an http(s) URL
  the canonicalizer accepts;
* ``cross-site``: another registrable domain (Public Suffix List, bundled with tldextract,
  no network), or another address for IP hosts;
* ``homepage-from-deep-page``: a deep page pointing at the site's root;
* ``paginated-to-first``: page 2+ of a series (``?page=2``, ``/page/2/``) pointing at
  another page.

Valid hints have reason ``self`` (the page's own key) or ``same-site``. A valid ``same-site``
hint records a key alias (page key -> canonical key) and sends the canonical URL on as a link
of the page (so the frontier fetches it unless its key was seen), when it is on a host the
spider follows; the canonical page goes to the callback of the page that named it.
"""

from __future__ import annotations

import functools
import ipaddress
import logging
import re
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urljoin, urlsplit

from scrapy import Request, Spider
from scrapy.http import TextResponse
from scrapy.http.request import NO_CALLBACK

from bloom_frontier.canonical import resolve_link
from bloom_frontier.canonical.rules import DEFAULT_RULES, RuleSet
from bloom_frontier.frontier.keys import carry_key
from bloom_frontier.logtext import short
from bloom_frontier.meta import CANONICAL_OF_META
from bloom_frontier.middlewares.redirects import key_or_error
from bloom_frontier.pagehints import head_canonicals, link_header_canonicals
from bloom_frontier.pipelines.records import CanonicalHint, KeyAlias, rules_version_of
from bloom_frontier.services import services_of
from bloom_frontier.soft404 import is_home_page
from bloom_frontier.spiders.site import page_base

if TYPE_CHECKING:
    from typing import Self

    import tldextract
    from scrapy.crawler import Crawler
    from scrapy.http import Response

    from bloom_frontier.services import CrawlServices

logger = logging.getLogger(__name__)

SOURCE_ELEMENT = "link-element"
SOURCE_HEADER = "link-header"

#: ``meta`` keys a callback needs to handle a page, carried over to its canonical page:
#: ``CrawlSpider._callback`` finds the page's rule by ``meta["rule"]``.
CALLBACK_META = ("rule",)
PAGE_PARAMS = frozenset({"page", "p", "pg", "paged", "pagenum", "page_num", "pageno"})
_PAGE_PATH = re.compile(r"/page/(\d+)/?$", re.IGNORECASE)


def site_of(host: str) -> str:
    """The registrable domain of ``host`` (an IP address is its own site)."""
    host = host.strip("[]").rstrip(".").lower()
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return _extractor()(host).top_domain_under_public_suffix or host


@functools.cache
def _extractor() -> tldextract.TLDExtract:
    """Offline: the Public Suffix List snapshot bundled with tldextract, never fetched.

    Imported on the first hint that needs it: tldextract (and the HTTP client it brings)
    takes 0.03 s to import, which the start of a crawl does not need.
    """
    import tldextract

    return tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)


def page_number(url: str) -> int | None:
    """The position of ``url`` in a paginated series, when its URL says so."""
    parts = urlsplit(url)
    match = _PAGE_PATH.search(parts.path)
    if match:
        return int(match[1])
    for name, value in parse_qsl(parts.query):
        if name.lower() in PAGE_PARAMS and value.isdigit():
            return int(value)
    return None


@dataclass(frozen=True)
class _Candidate:
    source: str
    href: str
    url: str | None  # resolved http(s) URL, or None
    key: str | None
    defect: str | None  # why this value alone cannot be a canonical


def _candidate(source: str, href: str, base: str, rules: RuleSet) -> _Candidate:
    url = resolve_link(base, href)
    if url is None:
        joined = urljoin(base, href.strip())
        if urlsplit(joined).scheme.lower() not in {"http", "https"}:
            return _Candidate(source, href, None, None, "non-http-scheme")
        # Not fetchable: say why when stage 1 can (bad port, bad host, ...).
        _, error = key_or_error(joined, rules)
        return _Candidate(
            source, href, None, None, f"invalid-url:{error}" if error else "unparseable"
        )
    key, error = key_or_error(url, rules)
    return _Candidate(source, href, url, key, f"invalid-url:{error}" if error else None)


def judge_hints(
    page_url: str,
    page_key: str | None,
    hints: Iterable[tuple[str, str, str]],
    rules: RuleSet = DEFAULT_RULES,
) -> list[CanonicalHint]:
    """Validate a page's canonical hints, given as ``(source, href, base URL)``; keys are
    made under ``rules``."""
    candidates = [_candidate(source, href, base, rules) for source, href, base in hints]
    distinct = {c.key or c.url or c.href for c in candidates}
    page_site = site_of(urlsplit(page_url).hostname or "")
    page_position = page_number(page_url)
    verdicts = []
    for candidate in candidates:
        reason = candidate.defect
        if reason is None:
            assert candidate.url is not None
            if len(distinct) > 1:
                reason = "conflicting"
            elif site_of(urlsplit(candidate.url).hostname or "") != page_site:
                reason = "cross-site"
            elif candidate.key == page_key:
                reason = "self"
            elif is_home_page(candidate.url) and not is_home_page(page_url):
                reason = "homepage-from-deep-page"
            elif (page_position or 0) >= 2 and page_number(candidate.url) != page_position:
                reason = "paginated-to-first"
            else:
                reason = "same-site"
        verdicts.append(
            CanonicalHint(
                page_url=page_url,
                page_key=page_key,
                source=candidate.source,
                href=candidate.href,
                canonical_url=candidate.url or urljoin(page_url, candidate.href.strip()),
                canonical_key=candidate.key,
                valid=reason in {"self", "same-site"},
                reason=reason,
            )
        )
    return verdicts


class CanonicalHintsMiddleware:
    """Spider middleware: records each page's canonical hints and follows a valid one.

    Installed far from the engine (high order) so that the canonical request it adds goes
    through Scrapy's depth/referer middlewares and the page's link batch like any link.
    Stats: ``canonical/valid/<reason>``, ``canonical/invalid/<reason>``, ``canonical/followed``,
    ``canonical/not_followed/no_callback``, ``canonical/failed/<exception>`` for a page whose
    hints could not be judged (logged at ERROR once per cause): its links still go through.
    """

    def __init__(self, crawler: Crawler, services: CrawlServices) -> None:
        self.crawler = crawler
        self.services = services
        self._logged_failures: set[tuple[str, str]] = set()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler, services_of(crawler))

    @property
    def rules(self) -> RuleSet:
        """The rules the crawl's links are keyed with now (its keyer's: ``CANON_HOST_RULES``,
        the seen filter's version prefix and the learned rules in force), so the keys
        recorded here agree with the links' keys."""
        return self.services.frontier.keyer.current_rules()

    def process_spider_output(self, response: Response, result: Iterable[Any]) -> Iterator[Any]:
        yield from self.safe_canonical_requests(response)
        yield from result

    async def process_spider_output_async(
        self, response: Response, result: AsyncIterator[Any]
    ) -> AsyncIterator[Any]:
        for request in self.safe_canonical_requests(response):
            yield request
        async for output in result:
            yield output

    def safe_canonical_requests(self, response: Response) -> list[Request]:
        """:meth:`canonical_requests`, or none when judging the hints raised (a library's
        error): counted and logged, so that the page's own links are not lost with them."""
        try:
            return self.canonical_requests(response)
        except Exception as exc:
            name = type(exc).__name__
            assert self.crawler.stats is not None
            self.crawler.stats.inc_value(f"canonical/failed/{name}")
            cause = (name, str(exc))
            if cause not in self._logged_failures:
                self._logged_failures.add(cause)
                logger.error(
                    "Cannot judge the canonical hints of %s (counted as canonical/failed/%s; "
                    "further pages failing the same way are not logged): %s: %s",
                    short(response.url),
                    name,
                    name,
                    short(exc),
                    exc_info=exc,
                )
            return []

    def canonical_requests(self, response: Response) -> list[Request]:
        """Record the page's hints; the request for a valid canonical to follow, if any."""
        hints = [
            (SOURCE_HEADER, href, response.url)
            for href in link_header_canonicals(response.headers.getlist("Link"))
        ]
        if isinstance(response, TextResponse):
            hrefs = head_canonicals(response)
            if hrefs:  # most pages name none: no <base> look-up for them
                base = page_base(response)
                hints += [(SOURCE_ELEMENT, href, base) for href in hrefs]
        if not hints:
            return []
        page_key = key_or_error(response.url, self.rules, response.request)[0]
        verdicts = judge_hints(response.url, page_key, hints, self.rules)
        recorder = self.services.recorder
        recorder.hints(verdicts)
        stats = self.crawler.stats
        assert stats is not None
        for verdict in verdicts:
            stats.inc_value(f"canonical/{'valid' if verdict.valid else 'invalid'}/{verdict.reason}")
        chosen = next((v for v in verdicts if v.reason == "same-site"), None)
        if chosen is None or page_key is None or chosen.canonical_key is None:
            return []
        recorder.key_alias(
            KeyAlias(page_key, chosen.canonical_key, "canonical", rules_version_of(page_key))
        )
        assert chosen.canonical_url is not None
        if not self.in_scope(chosen.canonical_url):
            return []
        request = self.follow_up(response, chosen.canonical_url)
        if request is None:
            stats.inc_value("canonical/not_followed/no_callback")
            return []
        if request.url == chosen.canonical_url:  # keyed once, here: the frontier reuses it
            carry_key(request, chosen.canonical_key)
        stats.inc_value("canonical/followed")
        return [request]

    def follow_up(self, response: Response, url: str) -> Request | None:
        """A request for ``url`` handled like the page that named it: the same callback,
        errback and ``cb_kwargs`` (a ``CrawlSpider`` rule's callback, a spider's
        ``parse_page``). None when that page has no callback of its own to give: an internal
        download, or Scrapy's default ``parse`` on a spider that does not define it."""
        page = response.request
        if page is None or page.callback is NO_CALLBACK:
            return None
        if page.callback is None and type(self.crawler.spider).parse is Spider.parse:
            return None
        meta = {CANONICAL_OF_META: response.url}
        meta.update((name, page.meta[name]) for name in CALLBACK_META if name in page.meta)
        return Request(
            url,
            callback=page.callback,
            errback=page.errback,
            cb_kwargs=dict(page.cb_kwargs),
            meta=meta,
        )

    def in_scope(self, url: str) -> bool:
        """On a host the spider follows links to (every host if it does not say)."""
        hosts = getattr(self.crawler.spider, "allowed_hosts", None)
        return hosts is None or (urlsplit(url).hostname or "") in hosts
