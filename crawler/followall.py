"""A plain spider's ``response.follow_all(css="a")`` at the project's speed, untouched.

Scrapy's ``follow_all`` builds a ``Request`` for every link of the page (``urljoin``, then
w3lib's ``safe_url_string`` in ``Request``), before any spider middleware sees it; on a real
site ~90% of them are its navigation, seen long ago, which the seen-links middleware then
drops. :class:`FollowAllResponses`, a downloader middleware the add-on installs, hands the
spider its HTML, XML and text responses as a subclass (:class:`FollowAllHtmlResponse` ...,
``response.replace(cls=...)``, as Scrapy's own middlewares replace responses) whose
``follow_all`` drops the links certainly seen before their ``Request`` is built, when the
seen-links middleware serves the spider
(:attr:`bloom_frontier.services.CrawlServices.seen_links`: nothing between the spider and it
would see a dropped link) and learned rules are not sampling links for a re-check.

For the links it keeps, ``follow_all`` gives what Scrapy's does: the same ``Request``s (the
same arguments, built by ``Request`` itself from the same URL), lazily, in page order, so
the middlewares' Referer, depth, URL-length and offsite outcomes and a page's repeats of a
new link are unchanged. A link dropped is counted as the seen-links middleware counts it
(``seen/duplicate``, ``dupefilter/filtered``) and fires ``request_dropped`` with the request
Scrapy would have built (only when something listens), once the spider has gone through
``follow_all``'s requests. Scrapy's own code runs instead when ``follow_all`` is given a
list of URLs or ``Link``s, a non-GET method, a body, or ``dont_filter``.

A spider that changes the requests ``follow_all`` returns before yielding them (another
``callback``, ``dont_filter``) should pass that to ``follow_all`` itself: the links dropped
as seen are the ones it would have yielded unchanged.
"""

from __future__ import annotations

import codecs
import logging
from collections.abc import Callable, Iterable, Iterator
from functools import lru_cache
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin

from lxml import etree
from parsel import SelectorList
from parsel.csstranslator import css2xpath
from scrapy import Request, Selector
from scrapy.http import HtmlResponse, Response, TextResponse, XmlResponse
from scrapy.utils.response import get_base_url
from w3lib.html import strip_html5_whitespace

from bloom_frontier.frontier.keys import send_request_dropped
from bloom_frontier.learning.recheck import LearnedRuleRecheck
from bloom_frontier.links import MEMO_CAPACITY, LinkPage, resolution_key, resolve_by_parts
from bloom_frontier.services import services_of
from bloom_frontier.userspiders import link_key

if TYPE_CHECKING:
    from collections.abc import Hashable
    from typing import Self

    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)
#: The elements ``follow`` takes a link from (Scrapy's ``_url_from_selector``).
_LINK_TAGS = frozenset(("a", "link"))


@lru_cache(maxsize=256)
def _compiled(query: str, namespaces: tuple[tuple[str, str], ...]) -> etree.XPath:
    return etree.XPath(query, namespaces=dict(namespaces), smart_strings=False)


def query_hrefs(response: TextResponse, css: str | None, xpath: str | None) -> list[str]:
    """The links ``follow_all(css=...)`` / ``follow_all(xpath=...)`` reads off
    ``response``: the query run on its HTML tree as parsel runs it, without a ``Selector``
    per result (parsel's own ``css`` / ``xpath`` when its selector is not a plain HTML one,
    or the query fails: its error is parsel's)."""
    selector = response.selector
    if type(selector) is Selector and selector.type == "html" and hasattr(selector.root, "xpath"):
        try:
            query = css2xpath(css) if css else xpath
            results = _compiled(query, tuple(selector.namespaces.items()))(selector.root)
        except Exception:  # parsel's own call below raises its error
            pass
        else:
            return hrefs_of(results if isinstance(results, list) else [results])
    return selector_hrefs(response.css(css) if css else response.xpath(xpath))  # type: ignore[arg-type]


def selector_hrefs(selectors: SelectorList[Any]) -> list[str]:
    """:func:`hrefs_of` the selectors' results."""
    return hrefs_of(selector.root for selector in selectors)


def hrefs_of(results: Iterable[Any]) -> list[str]:
    """The links ``follow_all`` reads off a query's ``results``: an attribute or text
    result stripped, an ``<a>``'s or ``<link>``'s ``href`` stripped; anything else skipped,
    as Scrapy skips it."""
    hrefs = []
    for root in results:
        if isinstance(root, str):
            hrefs.append(strip_html5_whitespace(root))
            continue
        if getattr(root, "tag", None) not in _LINK_TAGS:
            continue
        href = root.get("href")
        if href is not None:
            hrefs.append(strip_html5_whitespace(href))
    return hrefs


class FollowAllResponses:
    """Downloader middleware next to the engine: see the module docstring."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        #: ``urljoin``'s answers, under :func:`bloom_frontier.links.resolution_key`.
        self._joined: dict[Hashable, str] = {}
        self._recheck: LearnedRuleRecheck | None = None
        self._recheck_found = False
        self._logged = False

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    def process_response(self, request: Request, response: Response) -> Response:
        fast = FAST_RESPONSES.get(type(response))
        if fast is None or services_of(self.crawler).seen_links is None:
            return response
        if not self._logged:
            self._logged = True
            logger.info(
                "Responses' follow_all(css=...) drops links certainly seen before their "
                "requests are built"
            )
        replaced = response.replace(cls=fast)
        replaced._follow_all_by = self  # type: ignore[attr-defined]
        return replaced

    def sampling(self) -> bool:
        """True while learned rules sample a page's links for a re-check (the links must
        then go the middlewares' way)."""
        if not self._recheck_found:
            self._recheck = self.crawler.get_spider_middleware(LearnedRuleRecheck)
            self._recheck_found = True
        return self._recheck is not None and self._recheck.sampling()

    def join(self, page: LinkPage, href: str) -> str:
        """``urljoin(base, href)`` as ``Response.follow`` makes it, remembered (a
        ``ValueError`` raised as it would be)."""
        return resolve_by_parts(href, page, self._join_whole)  # type: ignore[return-value]

    def _join_whole(self, href: str, page: LinkPage) -> str:
        key = resolution_key(page, href)
        memo = self._joined
        url = memo.get(key)
        if url is None:
            url = memo[key] = urljoin(page.base_url, href)
            if len(memo) > MEMO_CAPACITY:
                self._joined = {key: url}
        return url

    def requests(
        self,
        response: TextResponse,
        hrefs: list[str],
        request_for: Callable[[str], Request],
        encoding: str,
    ) -> Iterator[Request]:
        """``request_for(url)`` for each of ``hrefs`` joined to ``response``'s base URL
        but those certainly seen, counted and reported as dropped once the spider is done
        with them. A non-ASCII link of a page not in UTF-8 is left to the middlewares (its
        request's URL is made safe in the page's encoding, its key is not)."""
        services = services_of(self.crawler)
        frontier = services.frontier
        keyer = frontier.keyer
        page = LinkPage(get_base_url(response), response.url, encoding)
        utf8 = codecs.lookup(encoding).name == "utf-8"
        dropped: list[tuple[str, str]] = []
        try:
            for href in hrefs:
                url = self.join(page, href)
                key = link_key(keyer, url) if utf8 or url.isascii() else None
                if key is not None and frontier.seen_link(url, key):
                    dropped.append((url, key))
                    continue
                yield request_for(url)
        finally:
            if dropped:
                keyer.duplicates(dropped)
                send_request_dropped(self.crawler, (request_for(url) for url, _ in dropped))


class FollowAll(TextResponse):
    """``follow_all`` dropping links certainly seen before their requests are built (see
    the module docstring); mixed into a copy of each of Scrapy's text response classes."""

    __slots__ = ()

    def follow_all(  # type: ignore[override]
        self,
        urls: Iterable[Any] | None = None,
        callback: Any = None,
        method: str = "GET",
        headers: Any = None,
        body: bytes | str | None = None,
        cookies: Any = None,
        meta: dict[str, Any] | None = None,
        encoding: str | None = None,
        priority: int = 0,
        dont_filter: bool = False,
        errback: Any = None,
        cb_kwargs: dict[str, Any] | None = None,
        flags: list[str] | None = None,
        css: str | None = None,
        xpath: str | None = None,
    ) -> Iterable[Request]:
        """Scrapy's ``TextResponse.follow_all``, the same requests less those certainly
        seen."""
        owner: FollowAllResponses | None = getattr(self, "_follow_all_by", None)
        hrefs: list[str] | None = None
        if owner is not None and method == "GET" and body is None and not dont_filter:
            if urls is None and (css is None) != (xpath is None) and (css or xpath):
                hrefs = query_hrefs(self, css, xpath)
            elif isinstance(urls, SelectorList) and css is None and xpath is None:
                hrefs = selector_hrefs(urls)
        if owner is None or hrefs is None or owner.sampling():
            return super().follow_all(
                urls=urls, callback=callback, method=method, headers=headers, body=body,
                cookies=cookies, meta=meta, encoding=encoding, priority=priority,
                dont_filter=dont_filter, errback=errback, cb_kwargs=cb_kwargs, flags=flags,
                css=css, xpath=xpath,
            )  # fmt: skip
        encoding = self.encoding if encoding is None else encoding

        def request_for(url: str) -> Request:
            return Request(
                url=url, callback=callback, method=method, headers=headers, body=body,
                cookies=cookies, meta=meta, encoding=encoding, priority=priority,
                dont_filter=dont_filter, errback=errback, cb_kwargs=cb_kwargs, flags=flags,
            )  # fmt: skip

        return owner.requests(self, hrefs, request_for, encoding)


class FollowAllTextResponse(FollowAll):
    __slots__ = ("_follow_all_by",)


class FollowAllHtmlResponse(FollowAll, HtmlResponse):
    __slots__ = ("_follow_all_by",)


class FollowAllXmlResponse(FollowAll, XmlResponse):
    __slots__ = ("_follow_all_by",)


#: Scrapy's response class -> the one :class:`FollowAllResponses` hands the spider.
FAST_RESPONSES: dict[type[Response], type[Response]] = {
    TextResponse: FollowAllTextResponse,
    HtmlResponse: FollowAllHtmlResponse,
    XmlResponse: FollowAllXmlResponse,
}
