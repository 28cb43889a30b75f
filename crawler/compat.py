"""Every use of Scrapy's private or undocumented internals, one small function each.

Each says why the project needs it and what public API would replace it. All are checked
against a real engine in a real crawl by ``tests/test_compat.py`` (also on the oldest
supported Scrapy, ``make test-min``), so a Scrapy release that renames one fails a test.
At run time, an internal that is gone logs one :class:`ScrapyInternalsChanged` warning
naming what it costs, instead of slowing the crawl down without a word.
See ``docs/scrapy-support.md``.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

from scrapy.utils.asyncio import call_later
from scrapy.utils.reactor import _asyncio_reactor_path

if TYPE_CHECKING:
    from collections.abc import Mapping

    from scrapy import Request
    from scrapy.core.downloader import Downloader, Slot
    from scrapy.core.engine import ExecutionEngine
    from scrapy.link import Link
    from scrapy.spiders import CrawlSpider, Rule


class ScrapyInternalsChanged(RuntimeWarning):
    """A Scrapy internal this package relies on is gone: the crawl goes on, with the loss
    the message names. Python shows each such warning once (Scrapy logs it)."""


def _missing(internal: str, loss: str) -> None:
    warnings.warn(
        f"Scrapy no longer has {internal}, which bloom_frontier uses: {loss}. "
        "Use a Scrapy release docs/scrapy-support.md lists.",
        ScrapyInternalsChanged,
        stacklevel=3,
    )


def wake_engine(engine: ExecutionEngine) -> None:
    """Have ``engine`` ask its scheduler for requests now; nothing while no spider is open.

    Why: the shared scheduler gets requests outside the engine's calls (leases land from a
    background thread, a host's politeness delay ends), and the engine otherwise asks only
    when a download or a scheduled request ends, or at its 5 s heartbeat.
    ``engine._slot.nextcall.schedule()`` is what that heartbeat calls.
    Public replacement: none yet; an engine method such as ``engine.wake()`` ("the scheduler
    has requests now"), the need Frontera's scheduler first hit (scrapy/scrapy#1618, which
    added the heartbeat).
    """
    try:
        slot = engine._slot
        schedule = slot.nextcall.schedule if slot is not None else None
    except AttributeError:
        _missing(
            "ExecutionEngine._slot.nextcall",
            "the engine asks the shared scheduler for requests only at its 5 s heartbeat",
        )
        return
    if schedule is not None:
        schedule()


def download_slots(downloader: Downloader) -> Mapping[str, Slot]:
    """``downloader``'s download slots by key, as made so far.

    Why: a worker of a shared frontier sets each slot's ``delay`` to 0 (as AutoThrottle
    does, which reads the same dict), and backoff holds a host's slot. ``Downloader.slots``
    and ``Slot`` are not underscored but undocumented.
    Public replacement: a documented slot API (``DOWNLOAD_SLOTS`` only sets slots up; per
    request and per slot delays are scrapy/scrapy#802).
    """
    return downloader.slots


def hold_download_slot(downloader: Downloader, slot: Slot, seconds: float) -> None:
    """Hold ``slot``'s queue for ``seconds``: its requests wait, then go as usual.

    Why: crawl-wide backoff (a 429 or 503) pauses this worker's own slot of the host too,
    the only pause there is in embedded mode. This is what the downloader does itself to
    keep a slot's delay: ``slot.latercall`` blocks the queue until
    ``Downloader._latercall(slot)`` runs and processes it again.
    Public replacement: a per-slot or per-request delay (scrapy/scrapy#802).
    """
    if not hasattr(slot, "latercall") or not callable(getattr(downloader, "_latercall", None)):
        _missing(
            "Downloader._latercall or Slot.latercall",
            "a host that asked to back off (429, 503) is not paused in this worker",
        )
        return
    if slot.latercall:
        slot.latercall.cancel()
    slot.latercall = call_later(seconds, downloader._latercall, slot)


def download_room(downloader: Downloader) -> int | None:
    """Downloads ``downloader`` can start now under ``CONCURRENT_REQUESTS``; None for no
    limit.

    Why: the shared scheduler leases no more requests than can leave at once, so that a
    leased request is sent on its host's politeness turn instead of waiting in a queue.
    ``Downloader.total_concurrency`` and ``Downloader.active`` are undocumented.
    Public replacement: none; ``Downloader.needs_backout()`` only says whether it is full.
    """
    if downloader.total_concurrency <= 0:
        return None
    return downloader.total_concurrency - len(downloader.active)


def asyncio_reactor_path() -> str:
    """The import path of Twisted's asyncio reactor, as Scrapy's settings name it.

    Why: ``scrapy crawl`` picks ``AsyncCrawlerProcess`` when ``TWISTED_REACTOR`` is this
    reactor, and the project's ``crawl`` command makes its process the same way
    (``scrapy.cmdline`` compares with the private ``scrapy.utils.reactor._asyncio_reactor_path``).
    Public replacement: a public constant, or a public function of ``scrapy.cmdline`` that
    makes the process a command would get.
    """
    return _asyncio_reactor_path


def offline_cookie_domains() -> None:
    """Have Scrapy's cookie middleware tell public suffixes by the Public Suffix List that
    tldextract bundles, never fetching one.

    Why: ``scrapy.downloadermiddlewares.cookies._split_domain`` is a ``TLDExtract`` built
    with its defaults, which fetches the list from publicsuffix.org (and writes it to a cache
    in the home directory) the first time a response sets a cookie with a ``Domain``: a
    connection the SSRF guard never sees, from a crawl that may have no business reaching
    the internet. The project's own extractor is offline the same way
    (``middlewares/canonical_hints.py``). Process-wide, like the attribute it replaces.
    Public replacement: none; a setting naming the extractor (or its ``suffix_list_urls``).
    """
    from scrapy.downloadermiddlewares import cookies
    from tldextract import TLDExtract

    current = getattr(cookies, "_split_domain", None)
    if not isinstance(current, TLDExtract):
        _missing(
            "scrapy.downloadermiddlewares.cookies._split_domain",
            "its public suffix list may be fetched from the internet, outside the SSRF guard",
        )
        return
    if current.suffix_list_urls:
        cookies._split_domain = TLDExtract(
            cache_dir=None,
            suffix_list_urls=(),
            include_psl_private_domains=current.include_psl_private_domains,
        )


def crawl_spider_rules(spider: CrawlSpider) -> list[Rule] | None:
    """The rules ``spider`` follows links with: its own copies of ``spider.rules``, each
    with its callbacks bound (None when Scrapy keeps them elsewhere now).

    Why: the add-on gives a rule a memoized ``LinkExtractor`` and drops the links a page
    yields that are certainly seen before Scrapy builds their requests
    (:mod:`bloom_frontier.userspiders`); it must change this spider's rules, not the class's
    ``rules`` (shared by every spider of the class, in every crawler of the process).
    ``CrawlSpider._rules`` is what ``_compile_rules`` builds from them.
    Public replacement: none; a hook of ``CrawlSpider`` for the link extraction of a rule.
    """
    rules = getattr(spider, "_rules", None)
    if not isinstance(rules, list):
        _missing("CrawlSpider._rules", "a CrawlSpider's links are extracted by Scrapy's code")
        return None
    return rules


def crawl_spider_request(spider: CrawlSpider, rule_index: int, link: Link) -> Request:
    """The request ``spider`` builds for ``link`` of its rule ``rule_index`` (before the
    rule's ``process_request``).

    Why: a link dropped as seen before Scrapy built its request still fires
    ``request_dropped`` with the request Scrapy would have dropped.
    ``CrawlSpider._build_request`` builds it.
    Public replacement: none.
    """
    return spider._build_request(rule_index, link)
