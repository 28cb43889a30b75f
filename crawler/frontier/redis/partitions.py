"""One crawl's queue split over partitions (``FRONTIER_PARTITIONS`` = N), one per hash tag.

A crawl's queue, leases and politeness state all live under one hash tag, hence on one Redis
Cluster master, whatever the cluster's size. With N partitions they live N times, each under
a tag the seen filter's slot-spreading helper puts on another master (the layout:
:mod:`.layout`), and the same scripts run against each partition's keys. What routes a
request, in Python:

- **host -> partition**: all requests of one politeness host live in one partition, so
  politeness stays one script there. A host is assigned when first seen to the partition
  with the fewest hosts, recorded once for every worker (``assign.lua``); assignment, not
  hashing: 30 hosts hashed onto 3 partitions are within 25 % of even less than half the time.
- **lease ids**: request ids are per partition, so a worker's lease id carries its
  partition (``<id>@<partition>``; with one partition ids are as they were).
- **leasing fairly**: each lease call starts at the next partition in turn and goes on to
  the next ones only while it has fewer requests than asked, so no partition starves.
- **admission**: a page's links may span partitions; they are staged in their own
  partitions, marked seen, committed partition by partition, the parent's lease released
  last (:class:`.admission.StagedAdmission`).

With N = 1 (the default) there is one partition, the crawl's own keys: the layout and every
call are as without partitions.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import redis

from bloom_frontier.frontier.redis.lua import FrontierScripts
from bloom_frontier.learning.state import parse_version
from bloom_frontier.redis_client import RedisSetupError, describe, text

if TYPE_CHECKING:
    from bloom_frontier.frontier.redis.layout import FrontierKeys

logger = logging.getLogger(__name__)

#: Joins a request id and its partition in a lease id held by a worker.
PARTITION_MARK = "@"
#: Most partitions a crawl may have (each is one hash tag of the cluster's 16384 slots).
MAX_PARTITIONS = 1024


def partition_count(client: redis.Redis, keys: FrontierKeys, count: int) -> int:
    """Record that the crawl at ``keys`` has ``count`` partitions, or refuse another count
    (a host's partition depends on it: the crawl would lose track of its queue). With one
    partition nothing is written (the layout is the plain one)."""
    if not 1 <= count <= MAX_PARTITIONS:
        raise RedisSetupError(f"FRONTIER_PARTITIONS must be 1 to {MAX_PARTITIONS}, got {count}")
    if count == 1:
        recorded = client.get(keys.partitions)
    else:
        if client.get(keys.partitions) is None and _queued_unpartitioned(client, keys):
            raise RedisSetupError(
                f"the crawl {keys.prefix} at {describe(client)} has requests queued or leased "
                f"without partitions, which FRONTIER_PARTITIONS={count} would never read: "
                "finish it with FRONTIER_PARTITIONS=1, or reset the crawl (scrapy frontier "
                "--reset) to start over."
            )
        recorded = client.set(keys.partitions, count, nx=True, get=True)
    if recorded is not None and _recorded(client, keys, recorded) != count:
        raise RedisSetupError(
            f"the crawl {keys.prefix} at {describe(client)} is split into {int(recorded)} "
            f"partitions, but FRONTIER_PARTITIONS is {count}: set FRONTIER_PARTITIONS="
            f"{int(recorded)}, or reset the crawl (scrapy frontier --reset) to start over."
        )
    _warn_if_sharing_masters(client, keys, count)
    return count


def _queued_unpartitioned(client: redis.Redis, keys: FrontierKeys) -> bool:
    """Whether the crawl's own keys (the layout of one partition, or an older release's,
    moved to lanes by :func:`.upgrade.upgrade_layout`) hold queued or leased requests."""
    return bool(client.zcard(keys.queue) or client.zcard(keys.leases))


def _warn_if_sharing_masters(client: redis.Redis, keys: FrontierKeys, count: int) -> None:
    """On a cluster, warn when partitions share a master while others have none (a cluster
    whose slots are not split evenly, as ``redis-cli --cluster create`` splits them): the
    tags are fixed, so every worker agrees on them whatever the cluster's current shape."""
    if count == 1 or not isinstance(client, redis.RedisCluster):
        return
    masters = {node.name for node in client.get_primaries()}
    used = Counter(client.get_node_from_key(part.queue).name for part in _all(keys, count))
    if len(used) < min(count, len(masters)):
        logger.warning(
            "The %d queue partitions of %s land on %d of the cluster's %d masters (%s): "
            "its slots are not split evenly. Rebalance the slots (redis-cli --cluster "
            "rebalance) to spread the queue over every master.",
            count,
            keys.prefix,
            len(used),
            len(masters),
            ", ".join(f"{name}: {parts}" for name, parts in sorted(used.items())),
        )


def _recorded(client: redis.Redis, keys: FrontierKeys, value: bytes | str) -> int:
    """The number of partitions recorded as ``value``; a clear error if it is not one."""
    if not text(value).isdigit() or not 1 <= int(value) <= MAX_PARTITIONS:
        raise RedisSetupError(
            f"{keys.partitions} at {describe(client)} holds {text(value)[:40]!r}, not a number "
            "of partitions: reset the crawl (scrapy frontier --reset), or set it right"
        )
    return int(value)


def _all(keys: FrontierKeys, count: int) -> list[FrontierKeys]:
    return [keys.partition(index, count) for index in range(count)]


def partition_keys(client: redis.Redis, keys: FrontierKeys) -> list[FrontierKeys]:
    """The keys of every partition of the crawl at ``keys``, as recorded (for commands
    that read a crawl: status, quarantine, reset)."""
    recorded = client.get(keys.partitions)
    return _all(keys, 1 if recorded is None else _recorded(client, keys, recorded))


class Partitions:
    """The partitions of one crawl's queue, as one worker routes to them (see the module
    docstring): their keys and scripts, the host assignment, lease ids, the lease turn."""

    def __init__(
        self, client: redis.Redis, keys: FrontierKeys, count: int, scripts: Iterable[str]
    ) -> None:
        names = tuple(scripts)
        self.count = count
        self.keys = _all(keys, count)
        self.scripts = [FrontierScripts(client, part_keys, names) for part_keys in self.keys]
        self._assign = FrontierScripts(client, keys, ("assign",)) if count > 1 else None
        self._client = client
        self._crawl_keys = keys
        #: Hosts whose partition this worker knows (an assignment never changes).
        self._known: dict[str, int] = {}
        self._turn = 0

    def rules_stale(self, version: str) -> bool:
        """Whether the crawl's learned rules are no longer those of ``version`` ('': never),
        read as ``rules_stale`` in ``common.lua`` reads it: for several partitions, whose
        scripts cannot see the crawl's key atomically."""
        current = self._client.get(self._crawl_keys.learned_version)
        return version != "" and parse_version(current) != parse_version(version)

    def run(self, partition: int, name: str, args: Sequence[Any] = ()) -> Any:
        """Run the script ``name`` over partition ``partition``'s keys."""
        return self.scripts[partition].run(name, args)

    # --- hosts -------------------------------------------------------------------------

    def of_hosts(self, hosts: Sequence[str]) -> list[int]:
        """The partition of each of ``hosts``, assigning those seen for the first time (one
        script call for the hosts this worker did not know, none when it knew them all)."""
        if self._assign is None:
            return [0] * len(hosts)
        unknown = list(dict.fromkeys(host for host in hosts if host not in self._known))
        if unknown:
            assigned = self._assign.run("assign", [self.count, *unknown])
            self._known.update(zip(unknown, (int(part) for part in assigned), strict=True))
        return [self._known[host] for host in hosts]

    def of_host(self, host: str) -> int:
        return self.of_hosts([host])[0]

    def keys_of(self, host: str) -> FrontierKeys:
        """The keys of ``host``'s partition."""
        return self.keys[self.of_host(host)]

    # --- lease ids ---------------------------------------------------------------------

    def lease_id(self, partition: int, request_id: bytes | str) -> str:
        """The lease id a worker holds for ``request_id`` of ``partition``."""
        request_id = text(request_id)
        return request_id if self.count == 1 else f"{request_id}{PARTITION_MARK}{partition}"

    def split(self, lease: str) -> tuple[int, str]:
        """The partition and request id of the lease id ``lease``."""
        if self.count == 1:
            return 0, lease
        request_id, _, partition = lease.rpartition(PARTITION_MARK)
        return int(partition), request_id

    def by_partition(self, leases: Iterable[str]) -> dict[int, list[str]]:
        """The request ids of ``leases``, grouped by partition."""
        groups: defaultdict[int, list[str]] = defaultdict(list)
        for lease in leases:
            partition, request_id = self.split(lease)
            groups[partition].append(request_id)
        return groups

    # --- leasing -----------------------------------------------------------------------

    def lease_order(self) -> list[int]:
        """The partitions in the order the next lease call asks them: from the next one in
        turn, so each partition is asked first as often as the others."""
        first = self._turn
        self._turn = (first + 1) % self.count
        return [(first + step) % self.count for step in range(self.count)]
