"""``ContentFingerprints``: fingerprint every fetched document, off the reactor, and store
the fingerprints with its page record.

Each response that reached the engine (redirects are followed before that; robots.txt and
other engine-internal downloads are skipped) is fingerprinted in Twisted's thread pool, with
a 200 HTML page's match features (:mod:`bloom_frontier.content.features`); the result is
added to the record store from the reactor thread and announced with the
:data:`content_fingerprinted` signal (``page``, ``content``, ``request``), which
:mod:`bloom_frontier.learning` listens to. Pending fingerprints are awaited when the spider
closes, and the record store waits for them before its last write. Stats:
``content/fingerprinted``, ``content/kind/<kind>``, ``content/failed``,
``content/too_large`` (a body above ``CONTENT_FINGERPRINT_MAX_BYTES``: its raw bytes hashed,
no normalization, which would hold the interpreter, and with it the loop, for a second).
A fingerprint of a page whose lease was already released is lost if the worker dies before
the next flush: it is derived data, the page itself is recorded.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.exceptions import NotConfigured
from scrapy.http import TextResponse
from scrapy.http.request import NO_CALLBACK
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet.defer import Deferred, DeferredList
from twisted.internet.threads import deferToThread

from bloom_frontier.content.constants import NORMALIZATIONS
from bloom_frontier.meta import DEDUPE_KEY_META
from bloom_frontier.pipelines.records import Chain, ContentRecord, PageRecord
from bloom_frontier.services import services_of
from bloom_frontier.soft404 import soft_404_flag

if TYPE_CHECKING:
    from collections.abc import Coroutine
    from typing import Self

    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response

logger = logging.getLogger(__name__)

#: Signal sent (``page``, ``content``, ``request``) once a page's fingerprints are stored.
content_fingerprinted = object()


def page_of(request: Request, response: Response) -> PageRecord:
    """The page record a response belongs to, as the redirect middleware records it: keyed
    on the chain's first URL."""
    chain = Chain.from_meta(request.meta)
    return PageRecord(
        fetch_url=chain.start_url if chain else request.url,
        final_url=response.url,
        key=request.meta.get(DEDUPE_KEY_META),
        status=response.status,
        chain_id=chain.chain_id if chain else None,
        flag=soft_404_flag(chain.start_url, response.url) if chain else None,
    )


def _fingerprint_page(
    body: bytes, text: str | None, status: int, flag: str | None, norm: str, url: str
) -> ContentRecord:
    """:func:`~bloom_frontier.content.features.fingerprint_page`, imported at the first
    document, in the thread pool: numpy (~0.1 s) is then not loaded before the first request."""
    from bloom_frontier.content.features import fingerprint_page

    return fingerprint_page(body, text, status, flag, norm, url)


class ContentFingerprints:
    """See the module docstring. ``CONTENT_FINGERPRINTS_ENABLED`` switches it off;
    ``CONTENT_NORMALIZATION`` (``n2``, or ``n1`` as stores before ``n2`` hold) chooses the
    normalization; bodies above ``max_bytes`` are hashed raw."""

    def __init__(self, crawler: Crawler, norm: str, max_bytes: int) -> None:
        self.crawler = crawler
        self.norm = norm
        self.max_bytes = max_bytes
        self._pending: set[Deferred[Any]] = set()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        if not crawler.settings.getbool("CONTENT_FINGERPRINTS_ENABLED"):
            raise NotConfigured
        norm = crawler.settings.get("CONTENT_NORMALIZATION")
        if norm not in NORMALIZATIONS:
            raise ValueError(f"CONTENT_NORMALIZATION must be one of {NORMALIZATIONS}, not {norm!r}")
        extension = cls(crawler, norm, crawler.settings.getint("CONTENT_FINGERPRINT_MAX_BYTES"))
        crawler.signals.connect(extension.response_received, signal=signals.response_received)
        crawler.signals.connect(extension.spider_closed, signal=signals.spider_closed)
        return extension

    def response_received(self, response: Response, request: Request, **_: Any) -> None:
        if request.callback is NO_CALLBACK:
            return
        page = page_of(request, response)
        text = None
        if len(response.body) > self.max_bytes:
            assert self.crawler.stats is not None
            self.crawler.stats.inc_value("content/too_large")
        elif isinstance(response, TextResponse):
            # Decoded here: Scrapy caches the text, which the spider's callback needs anyway.
            text = response.text
        pending = deferToThread(
            _fingerprint_page,
            response.body,
            text,
            response.status,
            page.flag,
            self.norm,
            page.final_url,
        )
        self._pending.add(pending)
        pending.addCallback(self._store, page, request)
        pending.addErrback(self._failed, page)
        pending.addBoth(self._done, pending)
        services_of(self.crawler).recorder.hold(pending)

    def _store(self, content: ContentRecord, page: PageRecord, request: Request) -> None:
        stats = self.crawler.stats
        assert stats is not None
        services_of(self.crawler).recorder.fingerprint(page, content)
        stats.inc_value("content/fingerprinted")
        stats.inc_value(f"content/kind/{content.kind}")
        self.crawler.signals.send_catch_log(
            signal=content_fingerprinted, page=page, content=content, request=request
        )

    def _failed(self, failure: Any, page: PageRecord) -> None:
        assert self.crawler.stats is not None
        self.crawler.stats.inc_value("content/failed")
        logger.error("Cannot fingerprint %s: %s", page.final_url, failure.getErrorMessage())

    def _done(self, result: Any, pending: Deferred[Any]) -> Any:
        self._pending.discard(pending)
        return result

    def spider_closed(self, **_: Any) -> Coroutine[Any, Any, None] | None:
        """Wait for the fingerprints still being computed, then write them: a coroutine
        Scrapy awaits (Scrapy 2.19 deprecates signal handlers that return a Deferred), none
        when nothing is pending."""
        return self._write_pending() if self._pending else None

    async def _write_pending(self) -> None:
        await maybe_deferred_to_future(DeferredList(list(self._pending)))
        await maybe_deferred_to_future(services_of(self.crawler).recorder.commit_all())
