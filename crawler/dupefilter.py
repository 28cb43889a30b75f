"""The dupefilter: Scrapy's gate for requests that did not come through a page batch."""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy.dupefilters import BaseDupeFilter

from bloom_frontier.frontier.keys import was_checked
from bloom_frontier.meta import DEDUPE_CHECKED_META
from bloom_frontier.services import services_of

if TYPE_CHECKING:
    from typing import Self

    from scrapy import Request, Spider
    from scrapy.crawler import Crawler

    from bloom_frontier.frontier import Frontier


class BloomDupeFilter(BaseDupeFilter):
    """Decides "seen before?" on the request's dedupe key, not Scrapy's fingerprint.

    Links from a page were already checked as one batch by
    :class:`bloom_frontier.middlewares.linkbatch.BatchDedupeMiddleware`; they pass straight through.
    Anything else (start requests, requests from other middlewares) is checked here, one at
    a time, through the same frontier: the embedded one marks its key seen (Scrapy's
    scheduler then queues it); the shared one only checks (its scheduler marks and queues
    in one atomic step, and never asks this class). ``dont_filter`` requests never reach this
    class. Deviations from Scrapy's ``RFPDupeFilter`` are listed in
    tests/test_dupefilter_contract.py (keys, not ``REQUEST_FINGERPRINTER_CLASS`` fingerprints,
    among them).
    The key goes to ``request.meta["dedupe_key"]``; rejections are logged with their reason
    and counted (``dupefilter/filtered``, ``dupefilter/invalid/<reason>``).
    """

    def __init__(self, frontier: Frontier) -> None:
        self.frontier = frontier

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(services_of(crawler).frontier)

    def request_seen(self, request: Request) -> bool:
        if was_checked(request):
            # Admitted in its page's batch: new, once. The same object offered again is
            # checked like any other (Scrapy's contract: a second call answers "seen").
            del request.meta[DEDUPE_CHECKED_META]
            return False
        seen = self.frontier.request_seen(request)
        request.meta.pop(DEDUPE_CHECKED_META, None)  # the mark is for batches; this one is done
        return seen

    def log(self, request: Request, spider: Spider) -> None:
        """Already logged and counted by the frontier, with the reason."""
