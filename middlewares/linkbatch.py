"""Spider middlewares that deduplicate a page's links: :class:`SeenLinksMiddleware` drops
those certainly seen as the spider yields them, :class:`BatchDedupeMiddleware` checks the
rest against the seen filter in one batch; and the downloader middleware that parses a large
page off Twisted's loop before its links are read (:class:`LargePageParser`)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from functools import partial
from typing import TYPE_CHECKING, Any
from weakref import WeakSet

from scrapy import Request, signals
from scrapy.http import HtmlResponse, Response, XmlResponse
from scrapy.utils.conf import build_component_list
from scrapy.utils.defer import maybe_deferred_to_future
from scrapy.utils.misc import load_object
from twisted.internet.threads import deferToThread

from bloom_frontier.frontier import failure_reason, handle_page
from bloom_frontier.frontier.bounded import (
    ADMIT_CHUNK,
    LOOP_SLICE,
    PARSE_IN_THREAD_BYTES,
    loop_turn,
    over_page_cap,
)
from bloom_frontier.frontier.keys import carry_key, send_request_dropped, was_checked
from bloom_frontier.learning.recheck import LearnedRuleRecheck
from bloom_frontier.meta import LEARN_RECHECK_META
from bloom_frontier.services import services_of

if TYPE_CHECKING:
    from typing import Self

    from scrapy.crawler import Crawler
    from twisted.python.failure import Failure

    from bloom_frontier.frontier import Frontier
    from bloom_frontier.services import CrawlServices


class BatchDedupeMiddleware:
    """Buffers the requests a response's callback yields and admits them in one batch.

    Installed next to the engine (low order), it sees the page's final output. Items pass
    through at once; requests are held until the callback is done, then handed to the
    frontier in a single call (one ``add_many`` / one Redis round trip per page). A page of
    many links is bounded (:mod:`bloom_frontier.frontier.bounded`, :class:`PageBatch`): its
    links are admitted in chunks as they come, the last one with the page's answer; past
    ``PAGE_MAX_LINKS`` requests the others are dropped and counted; and Twisted's loop gets a
    turn every few tens of milliseconds of the page's handling. The frontier returns the
    ones to schedule here, marked so the dupefilter does not check them again; the others
    fire Scrapy's ``request_dropped``, as if its scheduler had refused them. ``dont_filter``
    requests pass through untouched. When the callback fails midway, the links it yielded
    so far are still admitted before the error propagates (Scrapy then logs it and fires
    ``spider_error``), so they are not lost with the page. When it fails
    before yielding anything (or a spider middleware's ``process_spider_input`` raises),
    ``spider_error`` answers the page with an empty batch: a page is answered once handled,
    however its callback ended; a download whose errback raised is answered as failed.
    """

    def __init__(self, crawler: Crawler, services: CrawlServices) -> None:
        self.crawler = crawler
        self.services = services
        #: The requests held in a page's batch until it is admitted: a later link of that
        #: page with one of their keys is a repeat the batch would drop
        #: (:meth:`SeenLinksMiddleware.requests_for` drops it before building its request).
        self.held: WeakSet[Request] = WeakSet()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        middleware = cls(crawler, services_of(crawler))
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
        return self.services.frontier

    def process_spider_output(self, response: Response, result: Iterable[Any]) -> Iterable[Any]:
        page = PageBatch(self, response)
        try:
            for output in result:
                if page.holds(output):
                    yield from page.admit_chunk()
                    continue
                yield output
        except Exception:
            yield from page.admit_rest()
            raise
        yield from page.admit_rest()

    async def process_spider_output_async(
        self, response: Response, result: AsyncIterator[Any]
    ) -> AsyncIterator[Any]:
        page = PageBatch(self, response)
        try:
            async for output in result:
                if page.holds(output):
                    for request in page.admit_chunk():
                        yield request
                else:
                    yield output
                if page.slice_over():
                    await loop_turn()
        except Exception:
            for request in page.admit_rest():
                yield request
            raise
        for request in page.admit_rest():
            yield request

    def _admit(
        self, response: Response, batch: list[Request], *, last: bool = True
    ) -> list[Request]:
        """Admit ``batch``, links of ``response``'s page. The ``last`` one once what was
        recorded while handling the page is committed (the ``page_handled`` receivers may
        answer with a Deferred: the record store's flush, in its own thread), releasing its
        lease with them; the earlier chunks at once, without it. Links found seen fire
        ``request_dropped``, now or when a shared frontier's verdict arrives."""
        self.held.difference_update(batch)
        parent, after = None, None
        if last:
            parent, after = response.request, handle_page(self.crawler, response)
        dropped = partial(send_request_dropped, self.crawler)
        admitted = self.frontier.admit(parent, batch, after=after, on_late_duplicates=dropped)
        if len(admitted) < len(batch):
            kept = {id(request) for request in admitted}
            dropped(request for request in batch if id(request) not in kept)
        return admitted


class PageBatch:
    """One page's requests on their way to the frontier (:class:`BatchDedupeMiddleware`):
    held until :data:`~bloom_frontier.frontier.bounded.ADMIT_CHUNK` of them are, then admitted
    as a chunk; the rest with the page's answer, which releases its lease. Past
    ``PAGE_MAX_LINKS`` requests, the page's others are dropped and counted
    (:func:`~bloom_frontier.frontier.bounded.over_page_cap`, as the page ends).

    A chunk's links are queued before the page's records are committed: a worker killed
    meanwhile has the page fetched again, its links then found seen, and queued already."""

    def __init__(self, middleware: BatchDedupeMiddleware, response: Response) -> None:
        self.middleware = middleware
        self.response = response
        self.cap = middleware.crawler.settings.getint("PAGE_MAX_LINKS")
        self.batch: list[Request] = []
        #: Requests of the page held so far (admitted in chunks or not), and those past the cap.
        self.taken = self.over = 0
        self._slice_ends = time.monotonic() + LOOP_SLICE

    def holds(self, output: Any) -> bool:
        """Keep a request that needs dedup for the batch (or drop it past the cap); True if
        it was kept or dropped."""
        if not isinstance(output, Request) or output.dont_filter:
            return False
        if self.cap and self.taken >= self.cap:
            self.over += 1
            return True
        self.taken += 1
        self.batch.append(output)
        self.middleware.held.add(output)
        return True

    def admit_chunk(self) -> list[Request]:
        """Admit the requests held, once they make a chunk (else nothing)."""
        if len(self.batch) < ADMIT_CHUNK:
            return []
        chunk, self.batch = self.batch, []
        return self.middleware._admit(self.response, chunk, last=False)

    def admit_rest(self) -> list[Request]:
        """Admit the requests still held with the page's answer (count those over the cap)."""
        if self.over:
            stats = self.middleware.crawler.stats
            assert stats is not None
            over_page_cap(stats, self.response, self.taken, self.over)
        rest, self.batch = self.batch, []
        return self.middleware._admit(self.response, rest)

    def slice_over(self) -> bool:
        """True once the page kept Twisted's loop for :data:`LOOP_SLICE` (a new slice
        begins)."""
        now = time.monotonic()
        if now < self._slice_ends:
            return False
        self._slice_ends = now + LOOP_SLICE
        return True


class SeenLinksMiddleware:
    """Drops a page's links whose key is certainly seen as the spider yields them, before
    any other spider middleware spends anything on them (Scrapy's ``RefererMiddleware``,
    ``UrlLengthMiddleware``, ``DepthMiddleware``...: about 99% of a real site's links are
    its navigation, seen long ago).

    Installed closest to the spider (highest order). It only asks what is known without
    I/O (:meth:`bloom_frontier.frontier.Frontier.seen_before`: the in-process filter, or the keys a
    shared frontier's answers gave this worker) and marks nothing: links it cannot rule out
    go down the chain unchanged, and :class:`BatchDedupeMiddleware` next to the engine
    decides them after offsite filtering, depth limits and the rest did their part, as
    before (a page's repeats of a new link among them: the offsite filter counts each). So
    a link dropped here is one the batch would have found seen, and what the other
    middlewares do to new links does not change. Counted as the batch counts duplicates
    (``seen/duplicate``, ``dupefilter/filtered``), with Scrapy's ``request_dropped``.

    A project middleware that rewrites its links' URLs belongs above this one (a higher
    order), so the key is that of the URL fetched.

    A spider can ask it before building its requests (:meth:`requests_for`, as
    :attr:`bloom_frontier.services.CrawlServices.seen_links`, when no spider middleware sits
    between it and the spider but those it serves, :attr:`SERVED_ABOVE`, so nothing that
    would have seen a dropped link misses it): the ``site`` spider does, so a navigation link
    seen long ago costs a dictionary look-up, not a ``Request``.
    """

    #: Spider middlewares that may sit between this one and the spider when a spider asks
    #: :meth:`requests_for` (it does their part for the links it drops).
    SERVED_ABOVE: tuple[str, ...] = ("bloom_frontier.learning.recheck.LearnedRuleRecheck",)

    def __init__(self, crawler: Crawler, services: CrawlServices) -> None:
        self.crawler = crawler
        self.services = services
        #: The crawl's batch and learned-rule re-check, once the spider is open (None
        #: before, or for a middleware driven alone).
        self.batch: BatchDedupeMiddleware | None = None
        self.recheck: LearnedRuleRecheck | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        middleware = cls(crawler, services_of(crawler))
        crawler.signals.connect(middleware.spider_opened, signal=signals.spider_opened)
        return middleware

    def spider_opened(self) -> None:
        """Find the batch and the re-check; serve the spider's links if it may ask."""
        self.batch = self.crawler.get_spider_middleware(BatchDedupeMiddleware)
        self.recheck = self.crawler.get_spider_middleware(LearnedRuleRecheck)
        if self.serves_spider():
            self.services.seen_links = self

    def serves_spider(self) -> bool:
        """True if no spider middleware is installed between this one and the spider but
        those it serves (:attr:`SERVED_ABOVE`), in the order Scrapy builds them."""
        settings = self.crawler.settings.getwithbase("SPIDER_MIDDLEWARES")
        chain = [load_object(path) for path in build_component_list(settings)]
        if type(self) is not SeenLinksMiddleware or SeenLinksMiddleware not in chain:
            return False
        above = chain[chain.index(SeenLinksMiddleware) + 1 :]
        return all(
            f"{component.__module__}.{component.__qualname__}" in self.SERVED_ABOVE
            for component in above
            if self.crawler.get_spider_middleware(component) is not None
        )

    def requests_for(
        self, urls: Iterable[str], request_for: Callable[[str], Request]
    ) -> Iterator[Request]:
        """``request_for(url)`` for each link of ``urls`` not certainly seen, as if the
        spider yielded them all and this middleware dropped the seen ones, without a
        ``Request`` for those: judged by :meth:`~bloom_frontier.frontier.keys.RequestKeyer.link_key`
        (the key ``request_for(url)`` would get, memoized per URL), counted the same, and
        offered to the learned-rule re-check (which would have sampled their requests on
        their way here). ``request_for`` must build GET requests for ``url`` as given, not
        ``dont_filter``. Requests yielded carry their key. Whether learned rules are
        applied (so links may be sampled for a re-check) is asked once per call.

        A link repeating the key of an earlier link of ``urls`` whose request reached the
        page's batch (:attr:`BatchDedupeMiddleware.held`: every middleware below let it
        through) is dropped too, as the batch would drop it: an index page links to each
        new page once per anchor in it (``genindex-all.html`` of the Python docs: 13,787
        links to 464 pages, each a ``Request`` through every middleware before). Unless a
        learned rule made its key: a batch keyed again under reloaded rules
        (:mod:`bloom_frontier.frontier.redis.admission`) must still hold it."""
        frontier = self.services.frontier
        keyer = frontier.keyer
        recheck = self.recheck
        sample = recheck.sample if recheck is not None and recheck.sampling() else None
        held = self.batch.held if self.batch is not None else WeakSet()
        firsts: dict[str, Request] = {}  # per key, the latest request yielded
        dropped: list[tuple[str, str]] = []
        try:
            for url in urls:
                key = keyer.link_key(url)
                if key is None:
                    yield request_for(url)
                    continue
                first = firsts.get(key)
                repeat = (
                    first is not None
                    and first in held
                    and not keyer.link_merged_by_learned(url, key)
                )
                if not repeat and not frontier.seen_link(url, key):
                    request = firsts[key] = request_for(url)
                    if request.url == url:
                        carry_key(request, key)
                    yield request
                    continue
                dropped.append((url, key))
                sampled = sample(url) if sample is not None else None
                if sampled is not None:
                    request = request_for(url)
                    yield request.replace(
                        dont_filter=True, meta={**request.meta, LEARN_RECHECK_META: sampled}
                    )
        finally:
            if dropped:
                keyer.duplicates(dropped)
                send_request_dropped(self.crawler, (request_for(url) for url, _ in dropped))

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
        key = self.services.frontier.seen_before(output)
        if key is None:
            return False
        dropped.append((output, key))
        return True

    def _report(self, dropped: list[tuple[Request, str]]) -> None:
        """Count a page's dropped links and send ``request_dropped`` for them, once the
        page is done (as its batch does)."""
        if dropped:
            self.services.frontier.keyer.duplicates(dropped)
            send_request_dropped(self.crawler, [request for request, _ in dropped])


class LargePageParser:
    """Downloader middleware, next to the engine: an HTML or XML response of at least
    :data:`~bloom_frontier.frontier.bounded.PARSE_IN_THREAD_BYTES` gets its selector (the
    lxml tree the spider and the canonical hints read) built in a thread, where lxml lets
    Twisted's loop run meanwhile; a page of tens of megabytes held the loop a second or more.
    Nothing else touches the response until it is returned."""

    async def process_response(self, request: Request, response: Response) -> Response:
        if isinstance(response, (HtmlResponse, XmlResponse)) and (
            len(response.body) >= PARSE_IN_THREAD_BYTES
        ):
            await maybe_deferred_to_future(deferToThread(lambda: response.selector))
        return response
