"""Spider middlewares that deduplicate a page's links: :class:`SeenLinksMiddleware` drops
those certainly seen as the spider yields them, :class:`BatchDedupeMiddleware` checks the
rest against the seen filter in one batch."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from functools import partial
from typing import TYPE_CHECKING, Any

from scrapy import Request, signals
from scrapy.http import Response

from crawler.frontier import failure_reason, frontier_for, handle_page
from crawler.frontier.keys import send_request_dropped, was_checked

if TYPE_CHECKING:
    from typing import Self

    from scrapy.crawler import Crawler
    from twisted.python.failure import Failure

    from crawler.frontier import Frontier


class BatchDedupeMiddleware:
    """Buffers the requests a response's callback yields and admits them in one batch.

    Installed next to the engine (low order), it sees the page's final output. Items pass
    through at once; requests are held until the callback is done, then handed to the
    frontier in a single call (one ``add_many`` / one Redis round trip per page). The
    frontier returns the ones to schedule here, marked so the dupefilter does not check them
    again; the others fire Scrapy's ``request_dropped``, as if its scheduler had refused
    them. ``dont_filter`` requests pass through untouched. When the callback fails midway,
    the links it yielded so far are still admitted before the error propagates (Scrapy then
    logs it and fires ``spider_error``), so they are not lost with the page. When it fails
    before yielding anything (or a spider middleware's ``process_spider_input`` raises),
    ``spider_error`` answers the page with an empty batch: a page is answered once handled,
    however its callback ended; a download whose errback raised is answered as failed.
    """

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        middleware = cls(crawler)
        crawler.signals.connect(middleware.spider_error, signal=signals.spider_error)
        return middleware

    def spider_error(self, failure: Failure, response: Response | Failure | None = None) -> None:
        """A callback (or errback) raised: answer its request's lease if nothing did."""
        if isinstance(response, Response):
            self._admit(response, [])
            return
        request = getattr(response, "request", None)  # set by Scrapy's scraper
        if isinstance(request, Request):
            self.frontier.fail(request, failure_reason(failure.value))

    @property
    def frontier(self) -> Frontier:
        return frontier_for(self.crawler)

    def process_spider_output(self, response: Response, result: Iterable[Any]) -> Iterable[Any]:
        batch: list[Request] = []
        try:
            for output in result:
                if self._holds(output, batch):
                    continue
                yield output
        except Exception:
            yield from self._admit(response, batch)
            raise
        yield from self._admit(response, batch)

    async def process_spider_output_async(
        self, response: Response, result: AsyncIterator[Any]
    ) -> AsyncIterator[Any]:
        batch: list[Request] = []
        try:
            async for output in result:
                if self._holds(output, batch):
                    continue
                yield output
        except Exception:
            for request in self._admit(response, batch):
                yield request
            raise
        for request in self._admit(response, batch):
            yield request

    @staticmethod
    def _holds(output: Any, batch: list[Request]) -> bool:
        """Keep a request that needs dedup for the batch; True if it was kept."""
        if isinstance(output, Request) and not output.dont_filter:
            batch.append(output)
            return True
        return False

    def _admit(self, response: Response, batch: list[Request]) -> list[Request]:
        """Admit the page's links once what was recorded while handling it is committed
        (the ``page_handled`` receivers may answer with a Deferred: the record store's
        flush, in its own thread), releasing its lease with them. Links found seen fire
        ``request_dropped``, now or when a shared frontier's verdict arrives."""
        after = handle_page(self.crawler, response)
        dropped = partial(send_request_dropped, self.crawler)
        admitted = self.frontier.admit(
            response.request, batch, after=after, on_late_duplicates=dropped
        )
        if len(admitted) < len(batch):
            kept = {id(request) for request in admitted}
            dropped(request for request in batch if id(request) not in kept)
        return admitted


class SeenLinksMiddleware:
    """Drops a page's links whose key is certainly seen as the spider yields them, before
    any other spider middleware spends anything on them (Scrapy's ``RefererMiddleware``,
    ``UrlLengthMiddleware``, ``DepthMiddleware``...: about 99% of a real site's links are
    its navigation, seen long ago).

    Installed closest to the spider (highest order). It only asks what is known without
    I/O (:meth:`crawler.frontier.Frontier.seen_before`: the in-process filter, or the keys a
    shared frontier's answers gave this worker) and marks nothing: links it cannot rule out
    go down the chain unchanged, and :class:`BatchDedupeMiddleware` next to the engine
    decides them after offsite filtering, depth limits and the rest did their part, as
    before (a page's repeats of a new link among them: the offsite filter counts each). So
    a link dropped here is one the batch would have found seen, and what the other
    middlewares do to new links does not change. Counted as the batch counts duplicates
    (``seen/duplicate``, ``dupefilter/filtered``), with Scrapy's ``request_dropped``.

    A project middleware that rewrites its links' URLs belongs above this one (a higher
    order), so the key is that of the URL fetched.
    """

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    def process_spider_output(self, response: Response, result: Iterable[Any]) -> Iterable[Any]:
        dropped: list[tuple[Request, str]] = []
        try:
            for output in result:
                if not self._drops(output, dropped):
                    yield output
        finally:
            self._report(dropped)

    async def process_spider_output_async(
        self, response: Response, result: AsyncIterator[Any]
    ) -> AsyncIterator[Any]:
        dropped: list[tuple[Request, str]] = []
        try:
            async for output in result:
                if not self._drops(output, dropped):
                    yield output
        finally:
            self._report(dropped)

    def _drops(self, output: Any, dropped: list[tuple[Request, str]]) -> bool:
        """True if ``output`` is a link already seen (added to ``dropped``, with its key)."""
        if not isinstance(output, Request) or output.dont_filter or was_checked(output):
            return False
        key = frontier_for(self.crawler).seen_before(output)
        if key is None:
            return False
        dropped.append((output, key))
        return True

    def _report(self, dropped: list[tuple[Request, str]]) -> None:
        """Count a page's dropped links and send ``request_dropped`` for them, once the
        page is done (as its batch does)."""
        if dropped:
            frontier_for(self.crawler).keyer.duplicates(dropped)
            send_request_dropped(self.crawler, [request for request, _ in dropped])
