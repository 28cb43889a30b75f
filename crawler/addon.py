"""The bloom-frontier add-on: the one line a Scrapy project adds to crawl through this frontier.

.. code-block:: python

    ADDONS = {"bloom_frontier.Addon": 0}

:meth:`BloomFrontierAddon.update_settings` installs everything, with defaults a project's own
settings override:

- every setting of the defaults table (:mod:`bloom_frontier.defaults`), at ``"addon"`` priority;
- the dupefilter (:class:`bloom_frontier.dupefilter.BloomDupeFilter`) and, with ``REDIS_URL`` set,
  the shared frontier's scheduler (:class:`bloom_frontier.frontier.scheduler.RedisScheduler`);
- the spider, downloader middlewares and extensions of :data:`SPIDER_MIDDLEWARES`,
  :data:`DOWNLOADER_MIDDLEWARES`, :data:`EXTENSIONS` (and :data:`SHARED_DOWNLOADER_MIDDLEWARES`
  and :data:`SHARED_EXTENSIONS` with ``REDIS_URL``), at the orders given there unless the
  project lists them itself;
- Scrapy's ``RedirectMiddleware`` and ``MetaRefreshMiddleware`` switched off: replaced by
  :class:`bloom_frontier.middlewares.redirects.RedirectChainMiddleware`;
- ``JOBDIR`` disk queues that store requests as JSON, not pickle;
- the ``file``, ``data``, ``s3`` and ``ftp`` download handlers switched off;
- Scrapy's ``LogStats`` replaced by :class:`bloom_frontier.progress.CrawlProgress`; Scrapy's
  stats dump at close stays (``STATS_DUMP``), and the crawl summary comes after it;
- a download slot per link-shortener host (``SHORTENER_DELAY``, :func:`install_shortener_slots`).

:meth:`BloomFrontierAddon.update_pre_crawler_settings` installs the SSRF guard's DNS resolver,
which Scrapy reads from the crawler process's settings (``TWISTED_DNS_RESOLVER``). A script
that runs crawls with ``CrawlerRunner`` / ``AsyncCrawlerRunner`` installs no resolver at all:
it must call ``SSRFGuardResolver`` itself (see README, "Use it in your own Scrapy project").

A project setting that would defeat the frontier (its own ``SCHEDULER`` or
``DUPEFILTER_CLASS``, Scrapy's redirect middlewares enabled again) stops the crawl before it
starts with :class:`FrontierConflict`, whose message names the setting. So does, under
``scrapy crawl`` (:func:`check_fingerprinter`, which needs the crawler), a
``REQUEST_FINGERPRINTER_CLASS`` that tells apart requests for the same URL: the frontier
keys requests on their URL (and a non-GET's method and body), so it would merge them.

New components register here: add them to the tables below, with the order and why.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from scrapy import Request
from scrapy.http import Headers
from scrapy.settings import SETTINGS_PRIORITIES
from scrapy.utils.misc import load_object

from bloom_frontier.defaults import with_defaults
from bloom_frontier.shorteners import shorteners_from_settings

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings, Settings
    from scrapy.utils.request import RequestFingerprinterProtocol

logger = logging.getLogger(__name__)

#: Spider middlewares, by import path (imported by Scrapy, only when a crawl starts).
SPIDER_MIDDLEWARES = {
    # Low order = closest to the engine: sees the page's final output and checks all of its
    # links against the seen filter in one batch.
    "bloom_frontier.middlewares.linkbatch.BatchDedupeMiddleware": 10,
    # Start requests: Scrapy's start_urls requests are deduplicated like links (fetched once,
    # also across workers)...
    "bloom_frontier.middlewares.start_requests.StartRequestsMiddleware": 20,
    # ... and the host of each is exempt from the SSRF guard, for this crawler.
    "bloom_frontier.middlewares.ssrf.SSRFStartHostsMiddleware": 30,
    # Highest order = closest to the spider, before Scrapy's own (MetaCopyDetection 1000,
    # Depth 900, UrlLength 800, Referer 700): drops links certainly seen as the spider yields
    # them, so no other middleware spends anything on them; the batch decides the rest.
    "bloom_frontier.middlewares.linkbatch.SeenLinksMiddleware": 1010,
    # Above it: sees every link the spider yields, the ones a learned rule merged among them,
    # and re-checks a sample (CANON_LEARN_RECHECK).
    "bloom_frontier.learning.recheck.LearnedRuleRecheck": 1020,
    # High order = close to the spider: the canonical URL it adds passes Scrapy's depth and
    # referer middlewares and joins the page's link batch.
    "bloom_frontier.middlewares.canonical_hints.CanonicalHintsMiddleware": 950,
    # Between the two: links to shortener hosts become resolution requests (SHORTENER_*).
    "bloom_frontier.middlewares.shorteners.ShortenerLinksMiddleware": 900,
}
#: Downloader middlewares; None switches one of Scrapy's off.
DOWNLOADER_MIDDLEWARES = {
    # Before everything else downloads: drops queued requests a learned rule now merges.
    "bloom_frontier.learning.gate.LearnedRuleGate": 30,
    # Before Scrapy's offsite filter (50) and robots.txt (100): a refused host gets no
    # request at all, not even for robots.txt.
    "bloom_frontier.middlewares.ssrf.SSRFGuardMiddleware": 40,
    # Below RetryMiddleware (550): sees only failures retries gave up on.
    "bloom_frontier.middlewares.redirects.ChainFailureMiddleware": 60,
    # Replaces Scrapy's two redirect middlewares; after decompression (590) for meta refresh.
    "bloom_frontier.middlewares.redirects.RedirectChainMiddleware": 580,
    # Above RetryMiddleware (550): sees a 429/503 before it becomes a retry.
    "bloom_frontier.middlewares.politeness.HostBackoffMiddleware": 560,
    # Just above it: shortener answers cached, recorded, off-site targets settled (SHORTENER_*).
    "bloom_frontier.middlewares.shorteners.ShortenerResolveMiddleware": 585,
    # Next to the engine, after decompression: a large page parsed off the loop.
    "bloom_frontier.middlewares.linkbatch.LargePageParser": 5,
    # Just above it (its response is the one parsed): a text response whose follow_all
    # drops links certainly seen before their requests are built.
    "bloom_frontier.followall.FollowAllResponses": 6,
}
#: Scrapy's middlewares the frontier replaces (a project enabling them again is refused).
REPLACED_DOWNLOADER_MIDDLEWARES = (
    "scrapy.downloadermiddlewares.redirect.RedirectMiddleware",
    "scrapy.downloadermiddlewares.redirect.MetaRefreshMiddleware",
)
#: Downloader middlewares of the shared frontier only (``REDIS_URL`` set).
SHARED_DOWNLOADER_MIDDLEWARES = {
    # Before everything else downloads: drops queued requests a learned rule now merges.
    "bloom_frontier.learning.gate.LearnedRuleGate": 30,
    # Lowest order: next to the engine, it sees only the failures no other middleware handled.
    "bloom_frontier.frontier.scheduler.LeaseMiddleware": 1,
    # Right after Scrapy's RobotsTxtMiddleware (100): it must see the wait for robots.txt.
    "bloom_frontier.middlewares.politeness.GlobalPolitenessMiddleware": 101,
}
#: Extensions; None switches one of Scrapy's off.
EXTENSIONS = {
    # The crawl summary, printed last (after Scrapy's stats dump).
    "bloom_frontier.summary.CrawlSummary": 500,
    # Replaces Scrapy's LogStats: a live status line on a terminal, else a line every
    # LOGSTATS_INTERVAL seconds (pages, queued, filtered as seen, pages/min, errors).
    "scrapy.extensions.logstats.LogStats": None,
    "bloom_frontier.progress.CrawlProgress": 0,
    # Content fingerprints of every fetched document (CONTENT_FINGERPRINTS_ENABLED).
    "bloom_frontier.content.extension.ContentFingerprints": 520,
    # The crawl's services (recorder, frontier, SSRF policy, parameter rule learning), built
    # and closed in one place; components fetch it with crawler.get_extension().
    "bloom_frontier.services.CrawlServices": 530,
    # After the services: a CrawlSpider's rules get the memoized LinkExtractor, and their
    # links certainly seen are dropped before Scrapy builds their requests.
    "bloom_frontier.userspiders.CrawlSpiderLinks": 535,
    # Shared frontier only: CLOSESPIDER_PAGECOUNT/ITEMCOUNT/TIMEOUT hold for the whole crawl.
    "bloom_frontier.frontier.limits.CrawlWideLimits": 540,
    # Start-up's objects out of the crawl's full garbage collections (GC_FREEZE_ENABLED).
    "bloom_frontier.gcfreeze.FreezeStartupObjects": 550,
    # The worker's Prometheus endpoint (METRICS_PORT; off without it), after the services.
    "bloom_frontier.metrics.extension.WorkerMetrics": 560,
}

#: Extensions of the shared frontier only (``REDIS_URL`` set): installed without it, each
#: would only be disabled, with a warning on every embedded crawl.
SHARED_EXTENSIONS = {
    # Publishes pages/min and leases for `scrapy frontier`.
    "bloom_frontier.frontier.status.WorkerStatusReporter": 510,
}

DUPEFILTER = "bloom_frontier.dupefilter.BloomDupeFilter"
SHARED_SCHEDULER = "bloom_frontier.frontier.scheduler.RedisScheduler"
#: Scrapy's own scheduler: the embedded frontier keeps it (it asks the dupefilter).
EMBEDDED_SCHEDULER = "scrapy.core.scheduler.Scheduler"
RESOLVER = "bloom_frontier.ssrf.SSRFGuardResolver"
#: What Scrapy's redirect middlewares (and ours) are built on.
REDIRECT_BASE = "scrapy.downloadermiddlewares.redirect.BaseRedirectMiddleware"
#: The redirect middleware that records every hop.
REDIRECT_CHAIN = "bloom_frontier.middlewares.redirects.RedirectChainMiddleware"
#: Download handlers switched off: local files, data: URLs, S3 buckets and FTP servers are
#: never a crawl target (a project listing a handler itself keeps it).
DISABLED_DOWNLOAD_HANDLERS = ("file", "data", "s3", "ftp")
DISK_QUEUES = {
    "SCHEDULER_DISK_QUEUE": "bloom_frontier.frontier.diskqueue.JsonLifoDiskQueue",
    "SCHEDULER_START_DISK_QUEUE": "bloom_frontier.frontier.diskqueue.JsonFifoDiskQueue",
}


class FrontierConflict(RuntimeError):
    """A project setting defeats the frontier; the message names it and says what to do.
    Raised by the add-on, so Scrapy stops before the crawl starts."""


class _ConflictWithoutTraceback(logging.Filter):
    """Scrapy lets a crawl that fails to start end as an unhandled error, which asyncio
    (``scrapy crawl``) or Twisted (``FORCE_CRAWLER_PROCESS``) log with a traceback. A
    conflict is a settings mistake, not a bug: its record keeps only the message."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if "bloom_frontier.addon.FrontierConflict: " in str(record.msg):
            return False  # Twisted's text copy of the traceback; the record below has it
        if isinstance(error, FrontierConflict):
            record.msg, record.args, record.exc_info, record.exc_text = str(error), (), None, None
        return True


def _refuse(problems: list[str]) -> FrontierConflict:
    for name in ("asyncio", "twisted"):
        target = logging.getLogger(name)
        if not any(isinstance(f, _ConflictWithoutTraceback) for f in target.filters):
            target.addFilter(_ConflictWithoutTraceback())
    return FrontierConflict(conflict_message(problems))


class BloomFrontierAddon:
    """Installs the whole frontier in a Scrapy project; see the module docstring."""

    @classmethod
    def update_pre_crawler_settings(cls, settings: BaseSettings) -> None:
        """Settings of the crawler process, read before any crawler exists: the defaults
        (the resolver reads ``SSRF_*``) and the SSRF guard's DNS resolver."""
        with_defaults(settings)
        if settings.getbool("SSRF_GUARD_ENABLED"):
            settings.set("TWISTED_DNS_RESOLVER", RESOLVER, "addon")

    def update_settings(self, settings: Settings) -> None:
        shared = self.claim(settings)
        install(settings, "SPIDER_MIDDLEWARES", SPIDER_MIDDLEWARES)
        install(settings, "DOWNLOADER_MIDDLEWARES", DOWNLOADER_MIDDLEWARES)
        for path in REPLACED_DOWNLOADER_MIDDLEWARES:
            settings.set_in_component_priority_dict(
                "DOWNLOADER_MIDDLEWARES", load_object(path), None
            )
        if shared:
            install(settings, "DOWNLOADER_MIDDLEWARES", SHARED_DOWNLOADER_MIDDLEWARES)
        install(settings, "EXTENSIONS", EXTENSIONS)
        if shared:
            install(settings, "EXTENSIONS", SHARED_EXTENSIONS)
        handlers = settings.getdict("DOWNLOAD_HANDLERS")
        for scheme in DISABLED_DOWNLOAD_HANDLERS:
            handlers.setdefault(scheme, None)
        # At the project's own priority, if it set the dict: its other schemes stay.
        settings.set(
            "DOWNLOAD_HANDLERS", handlers, settings.getpriority("DOWNLOAD_HANDLERS") or "addon"
        )
        install_shortener_slots(settings)

    @staticmethod
    def claim(settings: BaseSettings) -> bool:
        """The defaults, dupefilter, scheduler and disk queues, without importing any
        component (``scrapy crawl`` checks a project with it before it starts); whether the
        frontier is shared. :class:`FrontierConflict` when a setting defeats the frontier."""
        with_defaults(settings)
        shared = bool(settings.get("REDIS_URL"))
        settings.set("DUPEFILTER_CLASS", DUPEFILTER, "addon")
        settings.set("SCHEDULER", SHARED_SCHEDULER if shared else EMBEDDED_SCHEDULER, "addon")
        for name, queue in DISK_QUEUES.items():
            settings.set(name, queue, "addon")
        problems = conflicts(settings, shared)
        if problems:
            raise _refuse(problems)
        return shared


def install_shortener_slots(settings: BaseSettings) -> None:
    """Rate-limit each shortener host (``SHORTENERS_ENABLED``): a download slot per host
    with ``SHORTENER_DELAY`` between requests and one at a time, which a shared crawl's
    lease script enforces across workers. A slot the project configured is kept."""
    if not settings.getbool("SHORTENERS_ENABLED"):
        return
    slots = dict(settings.getdict("DOWNLOAD_SLOTS"))
    delay = settings.getfloat("SHORTENER_DELAY")
    for host in sorted(shorteners_from_settings(settings).hosts):
        slots.setdefault(host, {"delay": delay, "concurrency": 1})
    priority = max(settings.getpriority("DOWNLOAD_SLOTS") or 0, SETTINGS_PRIORITIES["addon"])
    settings.set("DOWNLOAD_SLOTS", slots, priority)


def install(settings: Settings, name: str, components: dict[str, int]) -> None:
    """Add ``components`` to the component priority dict ``name``, each at its order unless
    the project lists it already (its order, or None to switch it off, wins)."""
    for path, order in components.items():
        settings.setdefault_in_component_priority_dict(name, load_object(path), order)


def _loaded(value: object) -> object:
    """The object an import path names (the value itself if not a path; None if it cannot
    be imported: Scrapy reports that itself when it builds the component)."""
    if not isinstance(value, str):
        return value
    try:
        return load_object(value)
    except (ImportError, NameError, ValueError):
        return None


def _is_subclass(value: object, path: str) -> bool:
    """``value`` is the class at ``path`` or inherits from it (by its MRO: Scrapy's
    scheduler base class answers ``issubclass`` for any class with the right methods)."""
    return isinstance(value, type) and load_object(path) in value.__mro__


def conflicts(settings: BaseSettings, shared: bool) -> list[str]:
    """What in ``settings`` (the add-on's own values already set) defeats the frontier."""
    problems = []
    dupefilter = _loaded(settings["DUPEFILTER_CLASS"])
    if dupefilter is not None and not _is_subclass(dupefilter, DUPEFILTER):
        problems.append(
            f"DUPEFILTER_CLASS = {settings['DUPEFILTER_CLASS']!r} replaces the frontier's "
            f"{DUPEFILTER}: requests would not be deduplicated on their keys"
        )
    scheduler = _loaded(settings["SCHEDULER"])
    expected = SHARED_SCHEDULER if shared else EMBEDDED_SCHEDULER
    if scheduler is not None and not _is_subclass(scheduler, expected):
        why = (
            "with REDIS_URL set, requests would not be shared between workers"
            if shared
            else "requests would not pass the frontier's dupefilter"
        )
        problems.append(f"SCHEDULER = {settings['SCHEDULER']!r} replaces {expected}: {why}")
    for path, order in settings.getdict("DOWNLOADER_MIDDLEWARES").items():
        component = _loaded(path)
        if (
            order is not None
            and _is_subclass(component, REDIRECT_BASE)
            and not _is_subclass(component, REDIRECT_CHAIN)
        ):
            problems.append(
                f"DOWNLOADER_MIDDLEWARES enables {path if isinstance(path, str) else component}"
                f" (order {order}): redirects must go through {REDIRECT_CHAIN}, which records "
                "every hop"
            )
    return problems


#: What :func:`check_fingerprinter` varies on one request: each would give a request the
#: frontier keys like the plain one.
_FINGERPRINT_PROBES: dict[str, dict[str, object]] = {
    **{
        f"its {name} header": {"headers": {name: "bloom-frontier-probe"}}
        for name in (
            "Accept",
            "Accept-Language",
            "Accept-Encoding",
            "Authorization",
            "Cookie",
            "Referer",
            "User-Agent",
            "X-Requested-With",
            "X-Bloom-Frontier-Probe",
        )
    },
    "its cookies": {"cookies": {"bloom-frontier-probe": "1"}},
    "its meta": {"meta": {"bloom_frontier_probe": 1}},
}
_PROBE_URL = "https://bloom-frontier.invalid/probe?q=1"
_PROBE_VALUE = b"bloom-frontier-probe"


class _EveryHeader(Headers):
    """Headers that hold every name, with one value: a fingerprinter that reads a header
    (by any name: Scrapy's ``include_headers``, say) reads it here."""

    def __contains__(self, key: object) -> bool:
        return True

    def __getitem__(self, key: object) -> bytes:
        return _PROBE_VALUE

    def get(self, key: object, def_val: object = None) -> bytes:
        return _PROBE_VALUE

    def getlist(self, key: object, def_val: object = None) -> list[bytes]:
        return [_PROBE_VALUE]


def _with_every_header() -> Request:
    request = Request(_PROBE_URL)
    request.headers = _EveryHeader()
    return request


def check_fingerprinter(fingerprinter: RequestFingerprinterProtocol, path: object) -> None:
    """:class:`FrontierConflict` if ``fingerprinter`` (the crawl's, built from
    ``REQUEST_FINGERPRINTER_CLASS`` = ``path``) tells apart two requests for the same URL
    that differ only in a header, cookies or meta: the frontier would merge what the project
    means as two requests, without a word."""
    plain = fingerprinter.fingerprint(Request(_PROBE_URL))
    told_apart = [
        what
        for what, change in _FINGERPRINT_PROBES.items()
        if fingerprinter.fingerprint(Request(_PROBE_URL, **change)) != plain  # type: ignore[arg-type]
    ]
    if not told_apart and fingerprinter.fingerprint(_with_every_header()) != plain:
        told_apart.append("a header")
    if told_apart:
        raise FrontierConflict(
            conflict_message(
                [
                    f"REQUEST_FINGERPRINTER_CLASS = {path!r} tells apart requests for the same "
                    f"URL by {', '.join(told_apart)}; the frontier deduplicates on URL keys "
                    "(and the method and body of non-GET requests), so it would merge them"
                ]
            )
        )


def conflict_message(problems: list[str]) -> str:
    return (
        "bloom-frontier cannot run with these settings ("
        + "; ".join(problems)
        + "). Remove them from the project's settings, or remove the add-on from ADDONS."
    )
