"""The recorder: the one component that writes a crawl's records.

Middlewares and extensions report what happened through the method named by the event (a
page fetched, a redirect chain ended, a page's canonical hints, the keys URLs had, a content
fingerprint, a shortener's answer, a learned parameter rule); the recorder writes them to the
record store (:class:`~bloom_frontier.pipelines.writer.StoreWriter`, ``STORE_URL``), which
it owns, and counts each chain's outcome (``redirect/outcome/<outcome>``) and flag
(``redirect/flag/<flag>``). Built and closed by :class:`bloom_frontier.services.CrawlServices`.

On a shared frontier the services have it commit what was recorded while a page was handled
before the page's lease is released (:meth:`page_handled`, on
:data:`bloom_frontier.frontier.page_handled`): a worker killed after that moment must not take
the page's redirect chains and canonical hints with it, since nobody fetches the page again.

A store that cannot be written any more (:class:`~bloom_frontier.pipelines.database.StoreFailed`:
a full disk, an I/O error, the SQLite file deleted or replaced) stops the crawl: the reason
is logged as an error and kept as the ``store/failed`` stat, the spider closes with the
reason ``store-failed`` and ``scrapy crawl`` ends with that line and exit status 2. A shared
crawl's pages whose records were not committed keep their leases until they expire: another
worker, or the next run, fetches them again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from contextlib import suppress
from typing import TYPE_CHECKING, Any

from scrapy.utils.defer import deferred_from_coro, maybe_deferred_to_future

from bloom_frontier.pipelines.writer import StoreWriter

if TYPE_CHECKING:
    from typing import Self

    from scrapy.crawler import Crawler
    from scrapy.statscollectors import StatsCollector
    from twisted.internet.defer import Deferred

    from bloom_frontier.pipelines.database import StoreFailed
    from bloom_frontier.pipelines.records import (
        CanonicalHint,
        Chain,
        ContentRecord,
        KeyAlias,
        PageRecord,
        ParamRule,
        ShortenerAnswer,
        UrlAlias,
    )


logger = logging.getLogger(__name__)

#: The stat holding why the store could not be written (``scrapy crawl`` exits with it).
FAILED_STAT = "store/failed"
#: The spider's close reason then.
FAILED_REASON = "store-failed"


class Recorder:
    """See the module docstring."""

    def __init__(
        self,
        store: StoreWriter,
        stats: StatsCollector,
        stop: Callable[[str], object] | None = None,
    ) -> None:
        self.store = store
        self.stats = stats
        #: Closes the spider with a reason (None: nothing to stop).
        self.stop = stop
        store.on_failure = self._store_failed

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        assert crawler.stats is not None

        async def close_spider(reason: str) -> None:
            engine = crawler.engine
            if engine is not None and engine.spider is not None:
                with suppress(RuntimeError):  # the spider has closed meanwhile
                    await engine.close_spider_async(reason=reason)

        def stop(reason: str) -> object:
            return deferred_from_coro(close_spider(reason))

        return cls(StoreWriter.from_settings(crawler.settings, crawler.stats), crawler.stats, stop)

    def _store_failed(self, failure: StoreFailed) -> None:
        """The store cannot be written: say so once, keep the reason, stop the crawl."""
        message = f"{failure}; the crawl stops ({self.store.pending} records not written)"
        logger.error("%s", message)
        self.stats.set_value(FAILED_STAT, message)
        if self.stop is not None:
            self.stop(FAILED_REASON)

    # --- what happened -------------------------------------------------------------------

    def page(self, page: PageRecord) -> None:
        """A response ended its request (and its redirect chain, if any)."""
        self.store.add_page(page)

    def chain(self, chain: Chain) -> None:
        """A redirect chain ended (or reached a newer state): its hops, outcome and flag."""
        assert chain.outcome is not None
        self.stats.inc_value(f"redirect/outcome/{chain.outcome}")
        if chain.flag:
            self.stats.inc_value(f"redirect/flag/{chain.flag}")
        self.store.add_chain(chain)

    def url_keys(self, aliases: Sequence[UrlAlias]) -> None:
        """The keys URLs had (what a Bloom filter rebuild reads)."""
        self.store.add_url_aliases(aliases)

    def key_alias(self, alias: KeyAlias) -> None:
        """One key stands for another (a valid canonical hint, a short link's target)."""
        self.store.add_key_alias(alias)

    def hints(self, hints: Sequence[CanonicalHint]) -> None:
        """A page's canonical hints, with their verdicts."""
        self.store.add_hints(hints)

    def fingerprint(self, page: PageRecord, content: ContentRecord) -> None:
        """A page's content fingerprints."""
        self.store.add_fingerprint(page, content)

    def hold(self, pending: Deferred[Any]) -> None:
        """Records still being made (a fingerprint in a thread): written before the store
        closes (:meth:`StoreWriter.hold`)."""
        self.store.hold(pending)

    def shortener_answer(self, answer: ShortenerAnswer) -> None:
        """Where a short link pointed when its shortener was asked."""
        self.store.add_shortener_answer(answer)

    def param_rule(self, rule: ParamRule) -> None:
        """A learned parameter rule, or a newer state of one."""
        self.store.add_param_rule(rule)

    # --- what was recorded ---------------------------------------------------------------

    def cached_shortener_answer(self, short_url: str) -> Deferred[ShortenerAnswer | None]:
        """The newest answer recorded for ``short_url`` (by this crawl or an earlier one),
        read off Twisted's loop."""
        return self.store.shortener_answer_later(short_url)

    def param_rules(self) -> list[ParamRule]:
        """Every parameter rule recorded."""
        return self.store.reader.param_rules()

    # --- committing ----------------------------------------------------------------------

    def commit_all(self) -> Deferred[None]:
        """Write everything recorded so far (records that come while the spider closes)."""
        return self.store.commit_all()

    async def page_handled(self, **_: Any) -> None:
        """Commit what was recorded before the handled page's lease is released."""
        await maybe_deferred_to_future(self.store.commit_page())

    async def close(self) -> None:
        """Write everything recorded and release the store's connections."""
        if (closing := self.store.close()) is not None:
            await maybe_deferred_to_future(closing)
