"""Crawl services: the objects a crawler's components share, built and closed in one place.

:class:`CrawlServices` is a Scrapy extension (the add-on installs it) and the one owner of a
crawler's services. A component gets it with :func:`services_of`, through Scrapy's
``crawler.get_extension()``: in its ``from_crawler`` for middlewares, the dupefilter and the
scheduler (built after the extensions), at ``spider_opened`` or first use for another
extension. A service is built on first use, in this order of dependency (each may use the
ones before it):

1. the recorder (:class:`bloom_frontier.pipelines.recorder.Recorder`), the record store's one
   writer; on a shared frontier it commits a handled page's records before the page's lease
   is released (:data:`bloom_frontier.frontier.page_handled`);
2. the frontier: :class:`~bloom_frontier.frontier.redis.RedisFrontier` with ``REDIS_URL``,
   else :class:`~bloom_frontier.frontier.memory.MemoryFrontier`; its last answers, delivered
   while it closes, may still be recorded (a redirect target found seen late);
3. the SSRF policy (:class:`bloom_frontier.ssrf.SSRFPolicy`): ``SSRF_ALLOWED_HOSTS`` and the
   hosts the spider was started on, registered with the process's resolver;
4. the learner (:class:`bloom_frontier.learning.extension.ParamRuleLearning`, None when
   ``CANON_LEARN = "off"``): made with the services, as it listens from the start; it keys
   the frontier's batches with the recorded rules from ``spider_opened``.

When the spider closes they close in reverse: the learner and the policy hold nothing to
close; the frontier closes (persists its filter, delivers its last answers, releases its
connection), a shared one once the answers waiting for their pages' records may be sent (a
crawl stopped by a signal); then the recorder writes everything left, which Scrapy awaits
before the process exits. The closing is connected to ``spider_closed`` when the first
service is built, after the extensions' own receivers, which may still use the services then.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

from scrapy import signals
from scrapy.exceptions import NotConfigured

from bloom_frontier.frontier import page_handled

if TYPE_CHECKING:
    from typing import Self

    from scrapy import Request
    from scrapy.crawler import Crawler

    from bloom_frontier.frontier import Frontier
    from bloom_frontier.learning.extension import ParamRuleLearning
    from bloom_frontier.pipelines.recorder import Recorder
    from bloom_frontier.ssrf import SSRFPolicy

#: Seconds between looks at the store while closing waits for its last commits.
STORE_FAILURE_POLL = 0.5


class SeenLinks(Protocol):
    """Drops a page's links certainly seen before a ``Request`` is built for them."""

    def requests_for(
        self, urls: Iterable[str], request_for: Callable[[str], Request]
    ) -> Iterator[Request]:
        """``request_for(url)`` for each link of ``urls`` not certainly seen."""
        ...


class CrawlServices:
    """See the module docstring."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self._recorder: Recorder | None = None
        self._frontier: Frontier | None = None
        self._ssrf_policy: SSRFPolicy | None = None
        self._learner: ParamRuleLearning | None = None
        self._closing_connected = False
        #: What a spider may ask about its links before building their requests (set at
        #: ``spider_opened`` by
        #: :class:`bloom_frontier.middlewares.linkbatch.SeenLinksMiddleware` when nothing
        #: between it and the spider would miss a link it drops); None: build them all.
        self.seen_links: SeenLinks | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        from bloom_frontier.learning.extension import ParamRuleLearning

        services = cls(crawler)
        try:
            services._learner = ParamRuleLearning.from_crawler(crawler)
        except NotConfigured:
            services._learner = None
        return services

    @property
    def recorder(self) -> Recorder:
        """The crawl's one writer of records."""
        if self._recorder is None:
            from bloom_frontier.pipelines.recorder import Recorder

            self._recorder = Recorder.from_crawler(self.crawler)
            if self.crawler.settings.get("REDIS_URL"):
                self.crawler.signals.connect(self._recorder.page_handled, signal=page_handled)
            self._close_when_spider_closes()
        return self._recorder

    @property
    def frontier(self) -> Frontier:
        """The crawler's single frontier, shared by the dupefilter, the link batch and the
        scheduler."""
        if self._frontier is None:
            if self.crawler.settings.get("REDIS_URL"):
                from bloom_frontier.frontier.redis import RedisFrontier

                self._frontier = RedisFrontier.from_crawler(self.crawler)
            else:
                from bloom_frontier.frontier.memory import MemoryFrontier

                self._frontier = MemoryFrontier.from_crawler(self.crawler)
            self._close_when_spider_closes()
        return self._frontier

    @property
    def ssrf_policy(self) -> SSRFPolicy:
        """The crawler's own SSRF policy: ``SSRF_ALLOWED_HOSTS`` and the hosts it was started
        on (:func:`~bloom_frontier.ssrf.crawl_hosts`, then each start request's, see
        :class:`bloom_frontier.middlewares.ssrf.SSRFStartHostsMiddleware`), registered with
        the process's resolver while the crawler runs."""
        if self._ssrf_policy is None:
            from bloom_frontier.ssrf import SSRFGuardResolver, SSRFPolicy, crawl_hosts

            policy = SSRFPolicy.from_settings(self.crawler.settings)
            if self.crawler.spider is not None:
                policy.exempt(crawl_hosts(self.crawler.spider))
            policy.register(SSRFGuardResolver.installed())
            self._ssrf_policy = policy
        return self._ssrf_policy

    @property
    def learner(self) -> ParamRuleLearning | None:
        """The crawl's parameter rule learning; None when ``CANON_LEARN = "off"``."""
        return self._learner

    def _close_when_spider_closes(self) -> None:
        if not self._closing_connected:
            self._closing_connected = True
            self.crawler.signals.connect(self.spider_closed, signal=signals.spider_closed)

    def spider_closed(self, **_: Any) -> Coroutine[Any, Any, None] | None:
        """Close the services built, in the reverse of their order (module docstring): the
        frontier, then the recorder's last writes, a coroutine Scrapy awaits."""
        if self._recorder is None:
            if self._frontier is not None:
                self._frontier.close()
            return None
        return self._close(self._recorder)

    async def _close(self, recorder: Recorder) -> None:
        """A shared frontier closes once the answers waiting for their pages' records (a
        crawl stopped by a signal or a limit) may be sent: it answers their leases as it
        closes instead of leaving them to expire. While the store cannot write this waits,
        as long as the store's last writes may (``close_timeout``), or until the store has
        failed (it will commit nothing more), then the frontier leaves those leases to expire
        (the first signal says what it waits for; a second stops the worker at once,
        :mod:`bloom_frontier.stopping`)."""
        from scrapy.utils.defer import maybe_deferred_to_future
        from twisted.internet import reactor
        from twisted.internet.defer import Deferred
        from twisted.internet.task import LoopingCall

        from bloom_frontier.frontier.redis import RedisFrontier

        if isinstance(self._frontier, RedisFrontier):
            # Not a timeout on the answers' own Deferreds: cancelling one would fire it, and
            # the outbox would send its answer.
            waited: Deferred[None] = Deferred()

            def done(_: object = None) -> None:
                if not waited.called:
                    waited.callback(None)

            self._frontier.answers_ready().addBoth(done)
            timer = reactor.callLater(recorder.store.close_timeout, done)  # type: ignore[attr-defined]
            # A store that failed will commit nothing more: no answer can become ready.
            failed = LoopingCall(lambda: recorder.store.failure is not None and done())
            failed.start(STORE_FAILURE_POLL, now=True)
            await maybe_deferred_to_future(waited)
            failed.stop()
            if timer.active():
                timer.cancel()
        if self._frontier is not None:
            self._frontier.close()
        await recorder.close()


def services_of(crawler: Crawler) -> CrawlServices:
    """The crawler's :class:`CrawlServices`; a one-line error when it is not enabled."""
    services = crawler.get_extension(CrawlServices)
    if services is None:
        raise RuntimeError(
            "bloom_frontier.services.CrawlServices is not enabled: add the add-on "
            '(ADDONS = {"bloom_frontier.Addon": 0}) or the extension to EXTENSIONS'
        )
    return services
