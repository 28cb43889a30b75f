"""The Redis side of global politeness (:mod:`bloom_frontier.frontier.politeness`), as one
worker sees it: what its leases report, new turns, crawl-wide backoff pauses, robots.txt
crawl delays and the robots.txt copies one worker fetches for all.
"""

from __future__ import annotations

import base64
import json
import logging
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import redis

from bloom_frontier.frontier.redis.lua import FrontierScripts

if TYPE_CHECKING:
    from scrapy.statscollectors import StatsCollector

    from bloom_frontier.frontier.politeness import HostLimits
    from bloom_frontier.frontier.redis.layout import FrontierKeys
    from bloom_frontier.frontier.redis.partitions import Partitions

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: Seconds a robots.txt fetched by one worker is shared with the others (Redis keys
#: ``<prefix>:robots_txt:<url>``, expiring). Longer would keep more of them in Redis; a
#: worker that needs one later fetches it again (and shares it again).
ROBOTS_TXT_SHARED_FOR = 3600
#: Largest robots.txt shared, in bytes (Google reads the first 500 KiB); a larger one is
#: fetched by each worker.
ROBOTS_TXT_MAX_SHARED = 512 * 1024


class HostPoliteness:
    """The Redis side of politeness, as one worker sees it: the outcome of its leases
    (stats, when to ask again), new turns, robots.txt crawl delays and shared copies, hosts
    waiting.

    Stats: ``frontier/politeness_skipped`` (queued requests a lease passed over because
    their host was not ready), ``frontier/hosts_waiting`` (hosts waiting on politeness at
    the last lease), ``robotstxt/crawl_delay`` (robots.txt with a ``Crawl-delay`` recorded).
    """

    def __init__(
        self,
        client: redis.Redis,
        keys: FrontierKeys,
        limits: HostLimits,
        stats: StatsCollector,
        partitions: Partitions,
    ) -> None:
        self.client = client
        #: The crawl's keys (shared robots.txt copies); a host's politeness state lives in
        #: its partition (``partitions``, whose scripts include turn, pause, paused, waiting).
        self.keys = keys
        self.limits = limits
        self.stats = stats
        self.partitions = partitions
        #: Seconds until the soonest host the last lease passed over is ready again (None:
        #: none was waiting on its delay).
        self.ready_in: float | None = None

    def _run(self, host: str, name: str, args: list[Any]) -> Any:
        """Run the script ``name`` in ``host``'s partition."""
        return self.partitions.run(self.partitions.of_host(host), name, args)

    def leased(self, skipped: int, soonest_ms: int, waiting: int) -> None:
        """Note what the lease script reported about politeness."""
        if skipped:
            self.stats.inc_value("frontier/politeness_skipped", skipped)
        self.stats.set_value("frontier/hosts_waiting", waiting)
        self.ready_in = soonest_ms / 1000 if soonest_ms >= 0 else None

    def hosts_waiting(self) -> int:
        """Hosts waiting on politeness now, across all workers and partitions
        (:func:`hosts_waiting`)."""
        args = self.limits.script_args()
        partitions = range(self.partitions.count)
        return sum(int(self.partitions.run(index, "waiting", args)) for index in partitions)

    def take_turn(self, host: str) -> float:
        """Take a new turn at ``host`` for a request already leased: 0 when taken, else
        the seconds to wait before asking again."""
        return int(self._run(host, "turn", [host, *self.limits.script_args()])) / 1000

    def strike(self, host: str) -> int:
        """Count a 429/503 answer without ``Retry-After`` from ``host``: how many in a row,
        across all workers, now."""
        strikes = self.partitions.keys_of(host).host_strikes
        return int(self._healed(host, lambda: self.client.hincrby(strikes, host, 1)))

    def clear_strikes(self, host: str) -> None:
        """``host`` answered something else: its next 429/503 starts a new count."""
        strikes = self.partitions.keys_of(host).host_strikes
        self._healed(host, lambda: self.client.hdel(strikes, host))

    def _healed(self, host: str, call: Callable[[], T]) -> T:
        """``call()`` (a command on ``host``'s partition); when a key it touches holds
        another type, moved aside by the heal script (:mod:`.lua`) and called again."""
        try:
            return call()
        except redis.ResponseError as exc:
            if not str(exc).startswith("WRONGTYPE"):
                raise
        self.partitions.run(self.partitions.of_host(host), "heal")
        return call()

    def pause(self, host: str, seconds: float) -> float:
        """Pause ``host`` for every worker for ``seconds`` (crawl-wide backoff): the
        seconds it is paused for from now (longer if another pause already ends later)."""
        return int(self._run(host, "pause", [host, math.ceil(seconds * 1000)])) / 1000

    def paused_for(self, host: str) -> float:
        """Seconds ``host`` is still paused for by a backoff (0: not paused)."""
        return int(self._run(host, "paused", [host])) / 1000

    def record_crawl_delay(self, host: str, seconds: float | None) -> None:
        """Record the ``Crawl-delay`` ``host``'s robots.txt asks for (None: none), for every
        worker's leases. Capped when used, at ``FRONTIER_MAX_CRAWL_DELAY``."""
        if seconds is None:
            self.client.hdel(self.partitions.keys_of(host).host_delay, host)
            return
        if not math.isfinite(seconds) or seconds < 0:
            logger.warning("Ignoring Crawl-delay %r of %s's robots.txt", seconds, host)
            return
        self.client.hset(self.partitions.keys_of(host).host_delay, host, round(seconds * 1000))
        self.stats.inc_value("robotstxt/crawl_delay")
        capped = min(seconds, self.limits.max_crawl_delay)
        logger.log(
            logging.INFO if capped < seconds else logging.DEBUG,
            "robots.txt of %s asks for a Crawl-delay of %ss: %ss between its requests%s",
            host,
            seconds,
            max(capped, self.limits.per_host.get(host, {}).get("delay", self.limits.delay)),
            " (capped by FRONTIER_MAX_CRAWL_DELAY)" if capped < seconds else "",
        )

    # --- robots.txt fetched once for all workers ---------------------------------------

    def shared_robots_txt(self, url: str) -> tuple[int, bytes] | None:
        """The status and body of the robots.txt at ``url`` another worker fetched and
        shared, or None."""
        stored = self.client.get(self.keys.robots_txt(url))
        if stored is None:
            return None
        record = json.loads(stored)
        return record["status"], base64.b64decode(record["body"])

    def claim_robots_txt(self, url: str, owner: str, seconds: float) -> bool:
        """Claim the fetch of the robots.txt at ``url`` for ``seconds``: True if no other
        worker is fetching it (others wait for the copy this one shares)."""
        claimed = self.client.set(
            self.keys.robots_txt_claim(url), owner, nx=True, px=round(seconds * 1000)
        )
        return bool(claimed)

    def share_robots_txt(self, url: str, status: int, body: bytes) -> bool:
        """Share the robots.txt fetched from ``url`` with the other workers and end the
        claim; False when it is too large to share (every worker fetches it then)."""
        key = self.keys.robots_txt(url)
        with self.client.pipeline(transaction=False) as pipe:
            if len(body) <= ROBOTS_TXT_MAX_SHARED:
                record = {"status": status, "body": base64.b64encode(body).decode("ascii")}
                pipe.set(key, json.dumps(record), ex=ROBOTS_TXT_SHARED_FOR)
            pipe.delete(self.keys.robots_txt_claim(url))
            pipe.execute()
        return len(body) <= ROBOTS_TXT_MAX_SHARED

    def unclaim_robots_txt(self, url: str) -> None:
        """The claimed fetch failed: let another worker try."""
        self.client.delete(self.keys.robots_txt_claim(url))


def hosts_waiting(client: redis.Redis, keys: FrontierKeys, limits: HostLimits) -> int:
    """Hosts of the crawl at ``keys`` waiting on politeness now: their next-allowed time
    is ahead, or they have as many requests in flight as ``limits`` allow."""
    return int(FrontierScripts(client, keys, ("waiting",)).run("waiting", limits.script_args()))
