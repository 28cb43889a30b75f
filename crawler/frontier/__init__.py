"""The frontier: where a page's links are deduplicated (in one batch) and queued.

One interface, one implementation per backend:

- :class:`bloom_frontier.frontier.memory.MemoryFrontier` (default): checks keys against the
  in-process seen filter and hands the new requests back to Scrapy's own scheduler.
- :class:`bloom_frontier.frontier.redis.RedisFrontier` (``REDIS_URL`` set): marks keys seen,
  queues the new requests and releases the page's lease in Redis in one atomic step (three
  crash-safe steps with a sharded filter), shared by every worker.

The crawler's single instance, shared by the dupefilter, the batching spider middleware and
the scheduler alike, is :attr:`bloom_frontier.services.CrawlServices.frontier`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from twisted.internet.defer import Deferred

    from bloom_frontier.frontier.keys import RequestKeyer


#: Signal sent (with ``response``) when a page is handled and its lease is about to be (or,
#: for a redirect to a known target, was just) released: no worker will fetch the page again,
#: so whatever was recorded while handling it must be made durable now.
page_handled = object()


def handle_page(crawler: Crawler, response: Response) -> Deferred[Any]:
    """Send :data:`page_handled` for ``response``; fires once every receiver is done (the
    record store's flush runs in its own thread): pass it as ``after`` to the answer that
    releases the page's lease."""
    from scrapy.utils.defer import deferred_from_coro

    return deferred_from_coro(
        crawler.signals.send_catch_log_async(signal=page_handled, response=response)
    )


def failure_reason(exception: BaseException) -> str:
    """A short, readable reason for a request that failed with ``exception``."""
    message = str(exception).strip()
    name = type(exception).__name__
    return f"{name}: {message}"[:300] if message else name


class Frontier(Protocol):
    """Admits a page's links in one batch."""

    #: Gives requests their keys and counts the verdicts.
    keyer: RequestKeyer

    def admit(
        self,
        parent: Request | None,
        children: Sequence[Request],
        *,
        after: Deferred[Any] | None = None,
        on_late_duplicates: Callable[[list[Request]], None] | None = None,
    ) -> list[Request]:
        """Deduplicate ``children`` (the requests produced while handling ``parent``'s
        response, or start requests when ``parent`` is None) in one batch.

        Returns the requests that were new (each carrying ``meta["dedupe_key"]`` and
        ``meta["dedupe_checked"]``). The memory frontier leaves scheduling them to the engine; the
        shared frontier has already queued them in Redis (and released ``parent``'s lease
        with them) and marks them ``meta["frontier_queued"]`` so its scheduler
        skips them. Call it even for an empty batch: that releases the parent's lease.
        Requests whose URL cannot be keyed are dropped and counted under
        ``dupefilter/invalid/<reason>``. A shared frontier releases ``parent``'s lease only
        once ``after`` (when given) has fired: the page's records are committed. When its
        verdict comes after the call returns (it then returns every request, marked
        queued), ``on_late_duplicates`` gets the ones found seen.
        """
        ...

    def seen_before(self, request: Request) -> str | None:
        """``request``'s key if it is certainly seen already, so its batch would drop it;
        no I/O, nothing marked (None is no verdict: the batch decides). The key is carried
        in its ``meta`` for the batch. Lets
        :class:`bloom_frontier.middlewares.linkbatch.SeenLinksMiddleware` drop duplicates as the
        spider
        yields them."""
        ...

    def seen_link(self, url: str, key: str) -> bool:
        """True if the link ``url``, whose key is ``key``, is certainly seen already (as
        :meth:`seen_before` asks it): no I/O, nothing marked. For links judged by key
        before any request is built for them
        (:meth:`bloom_frontier.middlewares.linkbatch.SeenLinksMiddleware.requests_for`)."""
        ...

    def request_seen(self, request: Request) -> bool:
        """Scrapy's dupefilter question for a request that did not come through a page
        batch: True to drop it. The memory frontier marks its key seen (Scrapy's scheduler
        then queues it); the shared one only checks, marking and queueing being one atomic
        step of its scheduler's ``enqueue_request``."""
        ...

    def fail(self, request: Request, reason: str, *, after: Deferred[Any] | None = None) -> None:
        """``request`` failed for good (download error after retries, callback error): a
        shared frontier records it with ``reason`` and releases its lease (once ``after``
        fired, when given)."""
        ...

    def close(self) -> None:
        """Persist state and release connections."""
        ...
