"""A crawl's state in Redis, trusted only while it is the crawl's: identity, memory, key types.

Redis restarted without persistence, ``FLUSHALL``, keys evicted under memory pressure: the
crawl's queue, leases and seen keys vanish, and a worker that went on would find nothing to
lease and end "finished" with part of the site. So:

- **identity**: the crawl's first start (a worker or ``seed``) writes
  ``<prefix>:identity``, ``<random id>.<ms on Redis' clock>`` (in every partition); each
  later start adopts it. Every worker's step (lease, admission, failure, quarantine,
  heartbeat) is given the identity its worker adopted and refuses when the crawl's is
  missing or another (:mod:`.lua`): the worker stops with one line and a non-zero exit
  (:class:`.protocol.FrontierLost`, finish reason :data:`LOST_REASON`). A start finding no
  identity is a fresh crawl (or one of an older release): it writes one. A key holding the
  crawl's requests found overwritten marks the identity ``lost:<why>`` (:mod:`.layout`):
  every worker stops, and no start adopts it until ``scrapy frontier SPIDER --reset``.
- **eviction**: a ``maxmemory-policy`` that can evict the frontier's keys (``allkeys-*``;
  ``volatile-*``, which evicts the frontier's expiring keys: a seen filter's replies kept for
  a retried batch among them, whose loss drops that batch's links) is refused at start
  unless ``FRONTIER_ALLOW_EVICTION``; memory past :data:`MEMORY_WARN` of ``maxmemory`` is
  reported. Under ``noeviction`` the worker's steps are refused whole past ``maxmemory``
  (their ``#!lua`` line) and retried, never half-written.
- **key types**: a fixed key of another type refuses the start when it is one holding
  requests (:data:`.layout.VITAL_KEYS`); the others a worker's step moves aside.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import redis

from bloom_frontier.frontier.redis.layout import KEY_TYPES, VITAL_KEYS, FrontierKeys
from bloom_frontier.frontier.redis.protocol import FrontierDamaged, FrontierLost, KeyOfWrongType
from bloom_frontier.redis_client import RedisSetupError, describe, text

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

    from bloom_frontier.frontier.redis.lua import FrontierScripts

logger = logging.getLogger(__name__)

#: The finish reason of a worker that stopped because the crawl's state was lost (its
#: ``scrapy crawl`` exits non-zero).
LOST_REASON = "frontier_lost"
#: Share of ``maxmemory`` past which the start reports Redis' memory as nearly full.
MEMORY_WARN = 0.9
#: The marker of an identity that says the crawl's state was found damaged.
LOST_MARK = "lost:"
#: Policies that never evict a key.
NO_EVICTION = "noeviction"
#: Seconds between the heartbeat's looks at Redis' eviction policy and count.
EVICTION_CHECK = 5.0


def adopt(client: redis.Redis, parts: list[FrontierKeys]) -> str:
    """The crawl's identity, written now if the crawl has none (its first start), in every
    one of its partitions (``parts``). Raises :class:`.protocol.FrontierDamaged` when a
    worker found the crawl's state damaged, :class:`.protocol.FrontierLost` when the
    partitions disagree (one of them lost since the others were written)."""
    seconds, micros = client.time()
    fresh = f"{secrets.token_hex(8)}.{seconds * 1000 + micros // 1000}"
    identity: str | None = None
    for keys in parts:
        recorded = client.set(keys.identity, identity or fresh, nx=True, get=True)
        found = None if recorded is None else text(recorded)
        if found is not None and found.startswith(LOST_MARK):
            raise FrontierDamaged(found.removeprefix(LOST_MARK))
        if identity is None:
            identity = found or fresh
        elif found is not None and found != identity:
            raise FrontierLost(f"{keys.identity} is {found}, {parts[0].identity} is {identity}")
    assert identity is not None
    return identity


def run_as(scripts: Iterable[FrontierScripts], identity: str) -> None:
    """Have the worker's steps of ``scripts`` checked against ``identity``."""
    for one in scripts:
        one.identity = identity


def wrong_types(client: redis.Redis, parts: list[FrontierKeys]) -> Iterator[tuple[str, str]]:
    """``(field, what)`` for each fixed key of ``parts`` holding another type than its own."""
    for keys in parts:
        names = FrontierKeys.names()
        with client.pipeline(transaction=False) as pipe:
            for name in names:
                pipe.type(getattr(keys, name))
            found = pipe.execute()
        for name, got in zip(names, map(text, found), strict=True):
            want = KEY_TYPES[name]
            if got not in ("none", want):
                yield name, f"{getattr(keys, name)} held a {got}, not a {want}"


def check_key_types(client: redis.Redis, parts: list[FrontierKeys], *, vital_only: bool) -> None:
    """Refuse a crawl with a fixed key of the wrong type: one holding requests
    (:class:`.protocol.FrontierDamaged`), or with ``vital_only`` False (a command reading the
    crawl) any (:class:`.protocol.KeyOfWrongType`)."""
    found = list(wrong_types(client, parts))
    vital = [what for name, what in found if name in VITAL_KEYS]
    if vital:
        raise FrontierDamaged("; ".join(vital))
    if found and not vital_only:
        raise KeyOfWrongType("; ".join(what for _, what in found))


def _info(client: redis.Redis, section: str) -> list[dict[str, Any]]:
    """``INFO section`` of the server (of each master, on a cluster); [] where INFO is
    disabled (managed Redis: nothing to check)."""
    try:
        if isinstance(client, redis.RedisCluster):
            replies = client.info(section, target_nodes=redis.RedisCluster.PRIMARIES)
            return list(replies.values())
        return [client.info(section)]
    except redis.ResponseError:
        return []


def _memory(client: redis.Redis) -> list[dict[str, Any]]:
    return _info(client, "memory")


class EvictionWatch:
    """Redis must not evict the frontier's keys during the crawl either: the start refuses an
    evicting policy, and the worker's heartbeat looks again every :data:`EVICTION_CHECK`
    seconds (:meth:`check`): a policy turned evicting since (``CONFIG SET``), or keys evicted
    since the worker started, is the frontier lost (an evicted key is queued requests,
    leases or seen keys gone; which ones, nobody can tell). Off with
    ``FRONTIER_ALLOW_EVICTION``."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.evicted_at_start = self.evicted()
        self._next = 0.0

    def evicted(self) -> int:
        """Keys Redis has evicted since it started (all masters)."""
        return sum(int(info.get("evicted_keys", 0)) for info in _info(self.client, "stats"))

    def check(self, *, now: bool = False) -> None:
        """Raise :class:`FrontierLost` when Redis evicts or may evict (see the class); at
        most once per :data:`EVICTION_CHECK` seconds, unless ``now`` (before a worker calls
        the crawl finished). Raises Redis' errors."""
        now_s = time.monotonic()
        if now_s < self._next and not now:
            return
        self._next = now_s + EVICTION_CHECK
        for info in _memory(self.client):
            policy = text(info.get("maxmemory_policy", NO_EVICTION))
            if policy != NO_EVICTION:
                raise FrontierLost(f"Redis' maxmemory-policy became {policy} during the crawl")
        if (evicted := self.evicted() - self.evicted_at_start) > 0:
            raise FrontierLost(f"Redis evicted {evicted} keys during the crawl")


def check_memory(client: redis.Redis, settings: BaseSettings, *, report: bool = True) -> None:
    """Refuse a Redis that may evict the frontier's keys (unless ``FRONTIER_ALLOW_EVICTION``),
    report one whose memory is nearly full (see the module docstring) when ``report``."""
    for info in _memory(client):
        policy = text(info.get("maxmemory_policy", NO_EVICTION))
        if policy != NO_EVICTION and not settings.getbool("FRONTIER_ALLOW_EVICTION"):
            raise RedisSetupError(
                f"Redis at {describe(client)} evicts keys when its memory is full "
                f"(maxmemory-policy {policy}), and an evicted key loses queued requests, "
                "leases or seen keys: set maxmemory-policy noeviction (CONFIG SET "
                "maxmemory-policy noeviction), or FRONTIER_ALLOW_EVICTION=True to crawl anyway"
            )
        used, limit = int(info.get("used_memory", 0)), int(info.get("maxmemory", 0))
        if report and limit and used >= MEMORY_WARN * limit:
            logger.warning(
                "Redis at %s uses %.0f%% of its maxmemory (%d of %d MiB): past it, the "
                "frontier's steps are refused and retried until memory is freed or raised",
                describe(client),
                100 * used / limit,
                used >> 20,
                limit >> 20,
            )


def check_start(
    client: redis.Redis, parts: list[FrontierKeys], settings: BaseSettings, *, report: bool = True
) -> None:
    """What a worker or ``seed`` checks before its first step: Redis' memory policy (its
    memory reported when ``report``: ``scrapy crawl``'s checks leave it to the worker's
    log), that no worker found the crawl damaged, that no key holding requests was
    overwritten."""
    check_memory(client, settings, report=report)
    check_key_types(client, parts, vital_only=True)
    _refuse_damaged(client, parts)


def check_readable(client: redis.Redis, parts: list[FrontierKeys]) -> None:
    """What a command reading the crawl (``scrapy frontier``) checks first: every fixed key
    holds its type, no worker found the crawl damaged; else one line, a non-zero exit."""
    check_key_types(client, parts, vital_only=False)
    _refuse_damaged(client, parts)


def _refuse_damaged(client: redis.Redis, parts: list[FrontierKeys]) -> None:
    """:class:`.protocol.FrontierDamaged` when a worker marked the crawl's identity lost."""
    for keys in parts:
        recorded = text(client.get(keys.identity) or "")
        if recorded.startswith(LOST_MARK):
            raise FrontierDamaged(recorded.removeprefix(LOST_MARK))
