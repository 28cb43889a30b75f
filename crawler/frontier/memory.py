"""The embedded frontier: an in-process Bloom filter in front of Scrapy's own scheduler."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scrapy.utils.job import job_dir

from bloom_frontier.frontier.keys import RequestKeyer
from bloom_frontier.seen.joblock import JobdirLock
from bloom_frontier.seen.layers import OlderLayers, prepare_jobdir
from bloom_frontier.seen.memory import MemoryBloomSeenFilter

if TYPE_CHECKING:
    from typing import Self

    from scrapy import Request
    from scrapy.crawler import Crawler
    from twisted.internet.defer import Deferred


class MemoryFrontier:
    """Checks a page's links against the seen filter in one ``add_many`` call and returns
    the new ones for Scrapy's scheduler (which then does not check them again). Links an
    ``older`` read-only layer has seen (``JOBDIR`` after ``scrapy rebuild-filter``, see
    :mod:`bloom_frontier.seen.layers`) count as seen too. A crawl on a ``JOBDIR`` holds its
    lock (:mod:`bloom_frontier.seen.joblock`) until the spider closes."""

    def __init__(
        self,
        seen: MemoryBloomSeenFilter,
        keyer: RequestKeyer,
        older: OlderLayers | None = None,
        lock: JobdirLock | None = None,
    ) -> None:
        self.seen = seen
        self.keyer = keyer
        self.older = older or OlderLayers([])
        self.lock = lock

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        settings = crawler.settings
        jobdir = job_dir(settings)
        lock = JobdirLock(jobdir) if jobdir else None
        if lock is not None:
            lock.acquire("scrapy crawl")
        try:
            seen = MemoryBloomSeenFilter.from_settings(
                settings, directory=str(Path(jobdir, "seen")) if jobdir else None
            )
            assert crawler.stats is not None
            keyer = RequestKeyer.from_settings(crawler.stats, settings).for_crawler(crawler)
            older = None
            if jobdir:
                host_rules = settings.getdict("CANON_HOST_RULES")
                older = prepare_jobdir(Path(jobdir, "seen"), keyer, host_rules)
        except BaseException:
            if lock is not None:
                lock.release()
            raise
        frontier = cls(seen, keyer, older, lock)
        return frontier

    def admit(
        self,
        parent: Request | None,
        children: Sequence[Request],
        *,
        after: Deferred[Any] | None = None,
        on_late_duplicates: Callable[[list[Request]], None] | None = None,
    ) -> list[Request]:
        """The new ones among ``children``, known at once (no lease to release: ``after``
        and ``on_late_duplicates`` are never needed)."""
        pairs = self.older.drop_seen(self.keyer.keyed(children), self.keyer)
        if not pairs:
            return []
        fresh = self.seen.add_many([key for _, key in pairs])
        return self.keyer.verdicts(pairs, fresh)

    def seen_before(self, request: Request) -> str | None:
        """``request``'s key if the filter holds it already (read only: its batch decides
        the others)."""
        key = self.keyer.key_of(request)
        return key if key is not None and self.seen.contains(key) else None

    def seen_link(self, url: str, key: str) -> bool:
        """True if the filter holds ``key`` already."""
        return self.seen.contains(key)

    def request_seen(self, request: Request) -> bool:
        """Mark ``request``'s key seen; True if it was already (or cannot be keyed)."""
        return not self.admit(None, [request])

    def fail(self, request: Request, reason: str, *, after: Deferred[Any] | None = None) -> None:
        """Nothing to release: Scrapy's scheduler already logged and counted the failure."""

    def close(self) -> None:
        self.seen.close()
        if self.lock is not None:
            self.lock.release()
