"""RedisBloom seen filter: one scalable Bloom filter in Redis, shared by every worker."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import redis

from bloom_frontier.redis_client import RedisSetupError, describe, text
from bloom_frontier.seen import check_filter_parameters

if TYPE_CHECKING:
    from redis.client import Pipeline
    from redis.cluster import ClusterPipeline

logger = logging.getLogger(__name__)

#: Seconds a batch's answer is kept so that a retried batch gets the same answer.
REPLY_TTL = 120

# Creates the filter and records its parameters next to it, atomically, unless it exists.
# Returns 1 if created, else the recorded parameters (false if the creator left none).
_RESERVE = """
if redis.call('EXISTS', KEYS[1]) == 1 then
  return redis.call('GET', KEYS[2])
end
redis.call('BF.RESERVE', KEYS[1], ARGV[2], ARGV[1], 'EXPANSION', ARGV[3])
redis.call('SET', KEYS[2], ARGV[4])
return 1
"""

# BF.INSERT (BF.MADD that recreates a lost filter with the configured parameters rather than
# RedisBloom's defaults), answering "1"/"0" per key. The answer is stored under the batch's
# reply key: if the reply is lost after Redis applied the batch, the client's retry reads the
# stored answer instead of hearing "seen" for keys it never got to schedule.
_ADD_ONCE = """
local done = redis.call('GET', KEYS[2])
if done then return done end
local flags = {}
local chunk = 1000  -- unpack() is limited by Lua's stack
for first = 5, #ARGV, chunk do
  local added = redis.call('BF.INSERT', KEYS[1], 'CAPACITY', ARGV[1], 'ERROR', ARGV[2],
    'EXPANSION', ARGV[3], 'ITEMS', unpack(ARGV, first, math.min(first + chunk - 1, #ARGV)))
  for i = 1, #added do flags[#flags + 1] = added[i] == 1 and '1' or '0' end
end
local reply = table.concat(flags)
redis.call('SET', KEYS[2], reply, 'EX', ARGV[4])
return reply
"""


def added_flags(reply: bytes | str) -> list[bool]:
    """The answer of one queued add: per key, True if it was new."""
    return [flag == "1" for flag in text(reply)]


@dataclass(frozen=True)
class BloomInfo:
    """``BF.INFO`` of the filter, for status reports."""

    capacity: int
    size_bytes: int
    items_inserted: int
    filters: int
    expansion: int | None


def bloom_info(client: redis.Redis, key: str) -> BloomInfo | None:
    """``BF.INFO`` of the filter at ``key``, read-only; None if there is none (yet)."""
    try:
        raw = client.bf().info(key)
    except redis.ResponseError as exc:
        if "not found" in str(exc).lower():
            return None
        raise
    return BloomInfo(
        capacity=raw.capacity,
        size_bytes=raw.size,
        items_inserted=raw.insertedNum,
        filters=raw.filterNum,
        expansion=raw.expansionRate,
    )


class RedisBloomSeenFilter:
    """A RedisBloom scalable Bloom filter at ``key``.

    Reserved on first use with ``capacity`` and ``error_rate``; when full, RedisBloom adds a
    sub-filter ``expansion`` times larger with a tighter rate, so the false-positive rate stays
    below ``error_rate``. Each :meth:`add_many` is one round trip, atomic in Redis, so
    concurrent workers adding the same key get exactly one "new" between them.
    """

    def __init__(
        self,
        client: redis.Redis,
        key: str,
        capacity: int,
        error_rate: float,
        expansion: int = 2,
    ) -> None:
        check_filter_parameters(capacity, error_rate, expansion)
        self.client = client
        self.key = key
        self.capacity = capacity
        self.error_rate = error_rate
        self.expansion = expansion
        self._params_key = f"{key}:params"
        self._reserve()

    @property
    def parameters(self) -> dict[str, float]:
        return {
            "capacity": self.capacity,
            "error_rate": self.error_rate,
            "expansion": self.expansion,
        }

    def _reserve(self) -> None:
        """Create the filter, or warn if the existing one was made with other parameters."""
        key_type = text(self.client.type(self.key))
        if key_type not in ("none", "MBbloom--"):
            raise RedisSetupError(
                f"key {self.key!r} at {describe(self.client)} holds a {key_type}, not a "
                "Bloom filter: set FRONTIER_KEY_PREFIX to another name"
            )
        recorded = self.client.eval(
            _RESERVE,
            2,
            self.key,
            self._params_key,
            self.capacity,
            self.error_rate,
            self.expansion,
            json.dumps(self.parameters),
        )
        if recorded == 1:
            logger.info("Reserved seen filter %s: %s", self.key, self.parameters)
            return
        if recorded is None:
            logger.warning(
                "Seen filter %s exists without recorded parameters; cannot check that its "
                "error rate is %s",
                self.key,
                self.error_rate,
            )
            return
        existing = json.loads(recorded)
        differing = {
            name: (existing.get(name), value)
            for name, value in self.parameters.items()
            if existing.get(name) != value
        }
        if differing:
            logger.warning(
                "Seen filter %s was reserved with %s; settings say %s. Keeping the existing "
                "filter (delete keys %s and %s to start over with the new settings).",
                self.key,
                {name: old for name, (old, _new) in differing.items()},
                {name: new for name, (_old, new) in differing.items()},
                self.key,
                self._params_key,
            )

    def add_many(self, keys: Sequence[str]) -> list[bool]:
        if not keys:
            return []
        with self.client.pipeline(transaction=False) as pipe:
            self.queue_add(pipe, keys)
            (reply,) = pipe.execute()
        return added_flags(reply)

    def queue_add(
        self,
        pipe: Pipeline | ClusterPipeline,
        keys: Sequence[str],
        *,
        batch_id: str | None = None,
        reply_ttl: int = REPLY_TTL,
    ) -> None:
        """Queue the atomic add of ``keys`` (not empty) on ``pipe``, so that the adds of
        several filters (shards) share a round trip; :func:`added_flags` reads its reply.

        The answer is kept ``reply_ttl`` seconds under ``batch_id`` (a random id if None):
        a caller that retries the batch itself after losing the reply passes the same id
        and hears the first answer, not "seen" for keys its first attempt added.

        Plain ``EVAL`` through ``execute_command``: redis-py's cluster pipeline refuses its
        ``eval``/``evalsha`` helpers (and could not load a script a node lacks), but routes
        an ``EVAL`` by its keys like any other command.
        """
        reply_key = f"{self.key}:reply:{batch_id or uuid.uuid4().hex}"
        route = {}
        if isinstance(self.client, redis.RedisCluster):
            # Named, the node spares redis-py's cluster pipeline a COMMAND GETKEYS round trip
            # per EVAL; if the slot has moved since, the MOVED reply is retried where it went.
            route = {"target_nodes": self.client.get_node_from_key(self.key)}
        pipe.execute_command(
            "EVAL",
            _ADD_ONCE,
            2,
            self.key,
            reply_key,
            self.capacity,
            self.error_rate,
            self.expansion,
            reply_ttl,
            *keys,
            **route,
        )

    def info(self) -> BloomInfo | None:
        """Size and fill of the filter; None if it does not exist (yet)."""
        return bloom_info(self.client, self.key)

    def close(self) -> None:
        """Nothing to release: ``client`` belongs to the caller, who closes it."""
