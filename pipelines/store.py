"""The crawler's record store writer, opened on first use (being replaced by crawl services)."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.utils.defer import maybe_deferred_to_future

from bloom_frontier.frontier import page_handled
from bloom_frontier.pipelines.records import Chain
from bloom_frontier.pipelines.writer import StoreWriter

if TYPE_CHECKING:
    from scrapy.crawler import Crawler


_stores: weakref.WeakKeyDictionary[Crawler, StoreWriter] = weakref.WeakKeyDictionary()


def store_for(crawler: Crawler) -> StoreWriter:
    """The crawler's record store, opened on first use and flushed when the spider closes.

    On a shared frontier it is also flushed before each handled page's lease is released
    (:data:`bloom_frontier.frontier.page_handled`): a worker killed after that moment must not take
    the page's redirect chains and canonical hints with it, since nobody refetches the page.
    """
    store = _stores.get(crawler)
    if store is None:
        store = StoreWriter.from_settings(crawler.settings)
        crawler.signals.connect(
            _close_on_spider_closed(store), signal=signals.spider_closed, weak=False
        )
        if crawler.settings.get("REDIS_URL"):
            crawler.signals.connect(_flush_on_page_handled(store), signal=page_handled, weak=False)
        _stores[crawler] = store
    return store


def _close_on_spider_closed(store: StoreWriter) -> Callable[..., Coroutine[Any, Any, None]]:
    """A ``spider_closed`` receiver awaiting :meth:`StoreWriter.close` (Scrapy waits for a
    coroutine; a returned Deferred is deprecated since Scrapy 2.19)."""

    async def close(**_: Any) -> None:
        if (closing := store.close()) is not None:
            await maybe_deferred_to_future(closing)

    return close


def _flush_on_page_handled(store: StoreWriter) -> Callable[..., Coroutine[Any, Any, None]]:
    async def flush(**_: Any) -> None:
        await maybe_deferred_to_future(store.commit_page())

    return flush


def record_chain(crawler: Crawler, chain: Chain) -> None:
    """Store a finished chain and count its outcome (``redirect/outcome/<outcome>``, and
    ``redirect/flag/<flag>``)."""
    stats = crawler.stats
    assert stats is not None and chain.outcome is not None
    stats.inc_value(f"redirect/outcome/{chain.outcome}")
    if chain.flag:
        stats.inc_value(f"redirect/flag/{chain.flag}")
    store_for(crawler).add_chain(chain)
