"""``LearnedRuleGate``: drop queued requests a rule learned since they were queued merges.

A link is keyed when its page is handled; a rule learned later (``CANON_LEARN="apply"``)
would not stop the variants already queued. This downloader middleware keys each request
again before it is downloaded, when a learned rule is active on its host (any other request
keeps the key the frontier made and it carries): if its key changed and the new key is
already in the seen filter, the request is dropped (``learn/dropped_queued``), its lease
(shared frontier) released; otherwise the new key is marked seen and it goes on.
Re-check fetches (:mod:`bloom_frontier.learning.recheck`) and ``dont_filter`` requests pass.
Before it marks or drops, it reloads the learned rules (one Redis read when shared): the
version a worker last read may be a second old, and a rule revoked since must not drop a page.
The reload and the mark are two calls, not one atomic step as the admission's version check
is (:mod:`bloom_frontier.frontier.redis.admission`): a revocation landing between them (a few
milliseconds) is not caught.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy.exceptions import IgnoreRequest, NotConfigured
from scrapy.http.request import NO_CALLBACK

from bloom_frontier.canonical import InvalidURL, dedupe_key
from bloom_frontier.frontier.keys import key_host
from bloom_frontier.meta import DEDUPE_KEY_META, LEARN_RECHECK_META
from bloom_frontier.services import services_of

if TYPE_CHECKING:
    from typing import Self

    from scrapy import Request
    from scrapy.crawler import Crawler

    from bloom_frontier.services import CrawlServices


class LearnedRuleGate:
    """See the module docstring."""

    def __init__(self, crawler: Crawler, services: CrawlServices) -> None:
        self.crawler = crawler
        self.services = services

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        if crawler.settings.get("CANON_LEARN") == "off":
            raise NotConfigured
        return cls(crawler, services_of(crawler))

    def process_request(self, request: Request) -> None:
        learning = self.services.learner
        old = request.meta.get(DEDUPE_KEY_META)
        if (
            learning is None
            or old is None
            or request.dont_filter
            or request.callback is NO_CALLBACK
            or request.meta.get(LEARN_RECHECK_META)
        ):
            return
        live = learning.live
        live.current()  # reloaded if the learned rules changed, as last read
        if not live.touches(key_host(old)):
            return
        try:
            new = dedupe_key(request.url, live.current())
            if new != old:  # about to mark or drop: not under a rule revoked a moment ago
                new = dedupe_key(request.url, live.latest())
        except InvalidURL:
            return
        if new == old:
            return
        request.meta[DEDUPE_KEY_META] = new
        frontier = self.services.frontier
        if frontier.seen.add_many([new])[0]:  # type: ignore[attr-defined]
            return
        assert self.crawler.stats is not None
        self.crawler.stats.inc_value("learn/dropped_queued")
        learning.dropped_queued(request.url, new)  # queued again if the rule is revoked
        frontier.admit(request, [])  # releases its lease on a shared frontier
        raise IgnoreRequest(f"{request.url} is {new} under learned rules: already seen")
