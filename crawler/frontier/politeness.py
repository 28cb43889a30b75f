"""Global per-host politeness for the shared frontier: N workers hit a host no harder than one.

Scrapy's own ``DOWNLOAD_DELAY`` and ``CONCURRENT_REQUESTS_PER_DOMAIN`` hold within one
process; N workers of a shared frontier would each apply them, hitting a host N times as
hard. With ``REDIS_URL`` set they apply to all workers together instead, held in Redis next
to the queue and enforced atomically by the lease script (``politeness.lua``):

- a request is leased only when its host's next-allowed time (Redis server clock) has come
  and fewer than the host's limit of requests are in flight; the lease moves the next-allowed
  time one delay ahead and counts the request in flight until its download ends (a response
  or a failure: its worker reports it at once, see :mod:`bloom_frontier.frontier.redis.leases`), or
  at the latest until its lease ends (answered, failed, given back or expired). As with
  Scrapy's own ``CONCURRENT_REQUESTS_PER_DOMAIN``, a limit of N means N downloads at once,
  across all workers; a worker still parsing a page does not hold its host's turn (on a
  one-host site, two workers otherwise shared the turns with their parsing, and one sat
  idle while the other parsed). A request counts from its lease, so one leased but still
  waiting in its worker (for a downloader slot, its host's robots.txt) counts too;
- the delay of a host is ``DOWNLOAD_DELAY`` (or its ``DOWNLOAD_SLOTS`` entry's ``delay``), or
  the ``Crawl-delay`` of its robots.txt when longer, capped at ``FRONTIER_MAX_CRAWL_DELAY``;
  the limit is ``FRONTIER_HOST_CONCURRENCY`` (default ``CONCURRENT_REQUESTS_PER_DOMAIN``, or
  the host's ``DOWNLOAD_SLOTS`` ``concurrency``);
- requests of hosts that are not ready are passed over (``frontier/politeness_skipped``)
  among the first ``FRONTIER_POLITENESS_SCAN`` lanes of the queue (one lane per host and
  priority level, see :mod:`bloom_frontier.frontier.redis.layout`), so a worker never idles behind
  one slow host while others are ready; a worker that finds nothing ready asks again when
  the soonest waiting host is due. Only when those first lanes all belong to waiting hosts
  does a worker wait although a later lane's host is ready.

The worker's side (:class:`bloom_frontier.middlewares.politeness.GlobalPolitenessMiddleware`) keeps
each
download on its turn: a request is sent right after its lease (the scheduler leases no more
than the downloader can start, and each worker's own download delay is 0, see
:func:`disable_local_delays`: the two delays would add up and a request could leave long
after its turn), and one that could not be (it waited for its host's robots.txt, which used
its turn) takes a new turn first. Each robots.txt is fetched by one worker and shared with
the others through Redis; its ``Crawl-delay`` is recorded for all. The Redis side of all this
is :mod:`bloom_frontier.frontier.redis.politeness`; this module imports no Redis code.

A host is Scrapy's download slot key (``meta["download_slot"]``, else the host name), stored
with each queued request as ``meta["frontier_host"]``. Two requests to a host are at least
its delay apart, less the jitter of the time a request takes from its turn to the wire:
milliseconds on an idle machine. A request that waits in its worker longer than
``STALE_TURN`` takes a new turn, but a stall of the worker's loop before the lease's reply is
handled (the wait is counted from then) or after that check adds to the jitter: the
politeness test allows the longest loop stall the workers measured.
``DOWNLOAD_DELAY_JITTER`` does not apply to the shared delay. AutoThrottle, if enabled, still
adjusts each worker's own slots on top.

Crawl-wide backoff: a 429 or 503 answer with ``Retry-After`` (seconds or an HTTP date), or
``BACKOFF_STRIKES`` of them in a row without one, pauses its host for every worker (its
next-allowed time moves to the end of the pause, see ``pause_host`` in politeness.lua), for
at most ``HOST_BACKOFF_MAX`` seconds; each worker's own downloader slot of that host pauses
too (:func:`pause_slot`), which is all there is to it in embedded mode
(:class:`bloom_frontier.middlewares.politeness.HostBackoffMiddleware`).

Stats: ``frontier/politeness_skipped``, ``frontier/hosts_waiting`` (at the last lease),
``frontier/politeness_new_turns``, ``robotstxt/crawl_delay``, ``robotstxt/shared_fetch``,
``robotstxt/shared_copy``.
"""

from __future__ import annotations

import datetime
import email.utils
import json
import logging
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.utils.httpobj import urlparse_cached

from bloom_frontier import defaults
from bloom_frontier.compat import download_slots, hold_download_slot
from bloom_frontier.meta import DOWNLOAD_SLOT_META

if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Self

    from scrapy import Request
    from scrapy.core.downloader import Downloader
    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)

#: Seconds a leased request may wait in the worker (e.g. for its host's robots.txt) and
#: still be sent on the turn of its lease; later, it takes a new turn first.
STALE_TURN = 0.05
#: Answers that ask a crawler to back off (Too Many Requests, Service Unavailable).
BACKOFF_STATUSES = frozenset({429, 503})
#: Backoff answers without ``Retry-After`` in a row from one host before it is paused: one
#: may be a glitch, and Scrapy's RetryMiddleware retries it anyway.
BACKOFF_STRIKES = 2
#: Seconds the host is paused at ``BACKOFF_STRIKES`` such answers, doubled at each more.
BACKOFF_FIRST_PAUSE = 2.0


def retry_after(value: bytes | str | None, now: float) -> float | None:
    """Seconds a ``Retry-After`` header asks to wait, at Unix time ``now``; None when it is
    absent or unreadable.

    >>> retry_after(b"120", now=0)
    120.0
    >>> retry_after(b"Thu, 01 Jan 1970 00:01:00 GMT", now=30)
    30.0
    >>> retry_after(b"Thu, 01 Jan 1970 00:01:00 GMT", now=90)  # already past
    0.0
    >>> retry_after(b"soon", now=0) is None
    True
    """
    if value is None:
        return None
    text = (value.decode("latin-1") if isinstance(value, bytes) else value).strip()
    if text.isascii() and text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # RFC 9110 dates are GMT; a date without a zone is read so too
        when = when.replace(tzinfo=datetime.UTC)
    return max(0.0, when.timestamp() - now)


def backoff_pause(asked: float | None, strikes: int, cap: float) -> float:
    """Seconds to pause a host that answered 429 or 503: what its ``Retry-After`` asked
    (``asked``), else nothing below ``BACKOFF_STRIKES`` answers in a row (``strikes``) and
    ``BACKOFF_FIRST_PAUSE`` doubled at each one more; never more than ``cap``.

    >>> backoff_pause(5.0, 0, cap=300), backoff_pause(3600.0, 0, cap=300)
    (5.0, 300)
    >>> [backoff_pause(None, strikes, cap=300) for strikes in (1, 2, 3, 4)]
    [0.0, 2.0, 4.0, 8.0]
    """
    if asked is None:
        if strikes < BACKOFF_STRIKES:
            return 0.0
        asked = BACKOFF_FIRST_PAUSE * 2.0 ** min(strikes - BACKOFF_STRIKES, 32)
    return min(asked, cap)


def pause_slot(downloader: Downloader, key: str, seconds: float) -> None:
    """Hold this worker's downloader slot ``key`` for ``seconds``: requests already queued
    in it wait too (a slot not made yet has none)."""
    slot = download_slots(downloader).get(key)
    if slot is None or seconds <= 0:
        return
    hold_download_slot(downloader, slot, seconds)


def politeness_key(request: Request) -> str:
    """The host ``request`` counts against: its Scrapy download slot ('' for none)."""
    slot = request.meta.get(DOWNLOAD_SLOT_META)
    if slot is not None:
        return str(slot)
    return urlparse_cached(request).hostname or ""


def _positive(settings: BaseSettings, name: str, value: float, *, zero_ok: bool) -> None:
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
        bound = "0 or more" if zero_ok else "more than 0"
        raise ValueError(f"{name} must be a number {bound}, got {settings.get(name)!r}")


@dataclass(frozen=True)
class HostLimits:
    """What politeness allows each host, across all workers (see the module docstring)."""

    #: Seconds between two requests to one host.
    delay: float = 0.0
    #: Requests of one host in flight at once (leased, until their download ends).
    concurrency: int = 16
    #: Longest robots.txt ``Crawl-delay`` honoured, in seconds.
    max_crawl_delay: float = defaults.FRONTIER_MAX_CRAWL_DELAY
    #: Queue entries one lease looks at for requests of ready hosts.
    scan: int = defaults.FRONTIER_POLITENESS_SCAN
    #: Per-host ``delay`` (seconds) and ``concurrency``, from ``DOWNLOAD_SLOTS``.
    per_host: Mapping[str, Mapping[str, float]] = field(default_factory=dict)

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> Self:
        """The limits the settings give (defaults in ``crawler/defaults.py``)."""
        concurrency_setting = (
            "FRONTIER_HOST_CONCURRENCY"
            if settings.getint("FRONTIER_HOST_CONCURRENCY")
            else "CONCURRENT_REQUESTS_PER_DOMAIN"
        )
        limits = cls(
            delay=settings.getfloat("DOWNLOAD_DELAY"),
            concurrency=settings.getint(concurrency_setting),
            max_crawl_delay=settings.getfloat("FRONTIER_MAX_CRAWL_DELAY"),
            scan=settings.getint("FRONTIER_POLITENESS_SCAN"),
            per_host={
                host: {name: slot[name] for name in ("delay", "concurrency") if name in slot}
                for host, slot in settings.getdict("DOWNLOAD_SLOTS").items()
            },
        )
        _positive(settings, "DOWNLOAD_DELAY", limits.delay, zero_ok=True)
        _positive(settings, concurrency_setting, limits.concurrency, zero_ok=False)
        _positive(settings, "FRONTIER_MAX_CRAWL_DELAY", limits.max_crawl_delay, zero_ok=True)
        _positive(settings, "FRONTIER_POLITENESS_SCAN", limits.scan, zero_ok=False)
        return limits

    def script_args(self) -> list[Any]:
        """The rules as the Lua scripts read them (``read_rules`` in politeness.lua)."""
        per_host = {
            host: {
                name: round(float(value) * 1000) if name == "delay" else int(value)
                for name, value in slot.items()
            }
            for host, slot in self.per_host.items()
        }
        return [
            self.scan,
            round(self.delay * 1000),
            self.concurrency,
            round(self.max_crawl_delay * 1000),
            json.dumps(per_host) if per_host else "{}",
        ]


def disable_local_delays(downloader: Downloader) -> None:
    """Set this worker's own download delays to 0: the shared frontier spaces the requests
    to each host across all workers already, and a local delay on top would hold a leased
    request back past its turn (so another worker's next turn could come right after it).

    Each download slot's ``delay`` is set to 0 (as AutoThrottle sets it), for the slots that
    exist and, as ``request_reached_downloader`` fires (after the request's slot is made,
    before the slot's queue is processed), for new ones; the slots are read through
    :func:`bloom_frontier.compat.download_slots` (undocumented Scrapy API).
    """
    settings = downloader.settings
    if settings.getfloat("DOWNLOAD_DELAY") or any(
        slot.get("delay") for slot in settings.getdict("DOWNLOAD_SLOTS").values()
    ):
        logger.info(
            "Download delays apply across all workers of the shared frontier (global "
            "politeness); this worker adds none of its own"
        )

    def no_local_delay(request: Request) -> None:
        slot = download_slots(downloader).get(request.meta.get(DOWNLOAD_SLOT_META, ""))
        if slot is not None:
            slot.delay = 0.0

    for slot in download_slots(downloader).values():
        slot.delay = 0.0
    downloader.signals.connect(
        no_local_delay, signal=signals.request_reached_downloader, weak=False
    )
