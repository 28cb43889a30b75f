"""A seen filter split over several RedisBloom filters (shards), for crawls past one key's size.

Redis caps one value at 512 MiB: one Bloom filter at 0.1 % holds about 300 million keys.
With ``SEEN_FILTER_SHARDS = N`` the filter is N :class:`RedisBloomSeenFilter` s, each sized
for ``SEEN_FILTER_CAPACITY / N`` keys (plus headroom for the hash's imbalance); a dedupe key
always goes to shard ``xxh64(key) mod N``, so every worker agrees where a key lives.

On Redis Cluster (``REDIS_URL=redis+cluster://...``) the shards spread over the masters: each
shard key has a hash tag of its own, chosen so that shard *i* hashes into the *i*-th N-th of
the 16384 slots. ``redis-cli --cluster create`` gives each of M masters an equal contiguous
slot range, so N shards land N/M per master (exactly, when M divides N). A shard's bookkeeping
keys (parameters, batch replies) share its tag, so its add script stays on one slot.

A batch costs one round trip per Redis node: the shards' adds are pipelined, and redis-py's
cluster pipeline sends each node its part at once.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING

import redis
import xxhash
from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

from bloom_frontier.redis_client import Client, RedisSetupError, describe
from bloom_frontier.seen.redis import REPLY_TTL, BloomInfo, RedisBloomSeenFilter, added_flags

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings


def has_hash_tag(key: str) -> bool:
    """True if Redis Cluster hashes only part of ``key`` (a non-empty ``{...}``)."""
    start = key.find("{")
    return start >= 0 and key.find("}", start + 2) >= 0


def shard_keys(base_key: str, shards: int) -> list[str]:
    """The Redis keys of ``shards`` shards of the filter ``base_key``.

    One shard is ``base_key`` itself (the plain :class:`RedisBloomSeenFilter`). Otherwise
    shard *i* of N is ``{<base_key without braces>:<i>/<N>:<salt>}``: the whole name is its
    hash tag, the smallest salt puts it in slots ``[i*16384/N, (i+1)*16384/N)``.
    """
    if shards < 1 or shards > REDIS_CLUSTER_HASH_SLOTS:
        raise ValueError(f"SEEN_FILTER_SHARDS must be 1 to 16384, got {shards}")
    if shards == 1:
        return [base_key]
    stem = base_key.replace("{", "").replace("}", "")
    names = []
    for shard in range(shards):
        low = shard * REDIS_CLUSTER_HASH_SLOTS // shards
        high = (shard + 1) * REDIS_CLUSTER_HASH_SLOTS // shards
        for salt in itertools.count():
            tag = f"{stem}:{shard}/{shards}:{salt}"
            if low <= key_slot(tag.encode()) < high:
                names.append(f"{{{tag}}}")
                break
    return names


def shard_capacity(capacity: int, shards: int) -> int:
    """Keys each shard is reserved for: its share of ``capacity`` plus four standard
    deviations of the hash's imbalance (sqrt of the share), so that a filter sized for its
    keys does not make the shards that drew a few more keys grow a sub-filter twice as big.
    """
    if shards == 1:
        return capacity
    share = capacity / shards
    return math.ceil(share + 4 * math.sqrt(share))


class ShardedBloomSeenFilter:
    """N RedisBloom filters acting as one :class:`~bloom_frontier.seen.SeenFilter`.

    :meth:`add_many` groups the keys by shard and sends one atomic add per shard touched, all
    in one pipeline; answers come back in the order of ``keys``, a key repeated in the batch
    being new at most once (its copies go to the same shard, in order). Concurrent workers
    adding the same key get exactly one "new" between them, as with one filter.
    """

    def __init__(
        self,
        client: Client,
        base_key: str,
        shards: int,
        capacity: int,
        error_rate: float,
        expansion: int = 2,
        *,
        owns_client: bool = False,
    ) -> None:
        self.client = client
        self.base_key = base_key
        self._owns_client = owns_client
        if shards == 1 and isinstance(client, redis.RedisCluster) and not has_hash_tag(base_key):
            # The filter's add script also touches <key>:params and <key>:reply:*.
            raise RedisSetupError(
                f"seen filter key {base_key!r} needs a {{hash tag}} on Redis Cluster: give "
                "FRONTIER_KEY_PREFIX one (the default '{%(spider)s}' is one), or set "
                "SEEN_FILTER_SHARDS above 1"
            )
        _record_shard_count(client, base_key, shards)
        per_shard = shard_capacity(capacity, shards)
        self.shards = [
            RedisBloomSeenFilter(client, key, per_shard, error_rate, expansion)
            for key in shard_keys(base_key, shards)
        ]

    def shard_of(self, key: str) -> int:
        """Index of the shard holding dedupe key ``key``."""
        return xxhash.xxh64_intdigest(key.encode()) % len(self.shards)

    def _positions_by_shard(self, keys: Sequence[str]) -> dict[int, list[int]]:
        """The positions in ``keys`` of the keys of each shard touched, in order."""
        positions: defaultdict[int, list[int]] = defaultdict(list)
        for position, key in enumerate(keys):
            positions[self.shard_of(key)].append(position)
        return positions

    @property
    def parameters(self) -> dict[str, float]:
        """The parameters each shard is reserved with (capacity: its share)."""
        return self.shards[0].parameters

    def add_many(
        self, keys: Sequence[str], *, batch_id: str | None = None, reply_ttl: int = REPLY_TTL
    ) -> list[bool]:
        """Add ``keys``; per key, True if it was new. A batch retried with the same
        ``batch_id`` within ``reply_ttl`` seconds gets the first answer again from every
        shard (see :meth:`RedisBloomSeenFilter.queue_add`)."""
        if not keys:
            return []
        positions = self._positions_by_shard(keys)
        with self.client.pipeline(transaction=False) as pipe:
            for shard, shard_positions in positions.items():
                self.shards[shard].queue_add(
                    pipe,
                    [keys[p] for p in shard_positions],
                    batch_id=batch_id,
                    reply_ttl=reply_ttl,
                )
            replies = pipe.execute()
        fresh = [False] * len(keys)
        for shard_positions, reply in zip(positions.values(), replies, strict=True):
            for position, is_new in zip(shard_positions, added_flags(reply), strict=True):
                fresh[position] = is_new
        return fresh

    def contains_many(self, keys: Sequence[str]) -> list[bool]:
        """Per key, True if its shard (probably) holds it; adds nothing. One pipelined
        ``BF.MEXISTS`` per shard touched; a shard not created yet holds nothing. For an
        older, read-only layer (:mod:`bloom_frontier.seen.layers`)."""
        if not keys:
            return []
        positions = self._positions_by_shard(keys)
        with self.client.pipeline(transaction=False) as pipe:
            for shard, shard_positions in positions.items():
                pipe.execute_command(
                    "BF.MEXISTS", self.shards[shard].key, *(keys[p] for p in shard_positions)
                )
            replies = pipe.execute(raise_on_error=False)
        found = [False] * len(keys)
        for shard_positions, reply in zip(positions.values(), replies, strict=True):
            if isinstance(reply, redis.ResponseError) and "not found" in str(reply).lower():
                continue
            if isinstance(reply, Exception):
                raise reply
            for position, hit in zip(shard_positions, reply, strict=True):
                found[position] = bool(hit)
        return found

    def contains(self, key: str) -> bool:
        """True if ``key`` was added (or is a false positive); adds nothing."""
        return self.contains_many([key])[0]

    def info(self) -> list[BloomInfo | None]:
        """``BF.INFO`` of each shard (None for a shard not created yet)."""
        return [shard.info() for shard in self.shards]

    def close(self) -> None:
        if self._owns_client:
            self.client.close()


def seen_filter_from_settings(
    client: Client, key: str, settings: BaseSettings
) -> ShardedBloomSeenFilter:
    """The seen filter at ``key`` on ``client`` (which must have RedisBloom, and stays the
    caller's to close), sized by ``SEEN_FILTER_CAPACITY``, ``SEEN_FILTER_ERROR_RATE`` and
    ``SEEN_FILTER_EXPANSION`` and split into ``SEEN_FILTER_SHARDS`` shards (one shard is the
    plain :class:`RedisBloomSeenFilter` at ``key`` itself).

    The one place these settings are read, so that every worker of a crawl builds the same
    filter."""
    return ShardedBloomSeenFilter(
        client,
        key,
        shards=settings.getint("SEEN_FILTER_SHARDS"),
        capacity=settings.getint("SEEN_FILTER_CAPACITY"),
        error_rate=settings.getfloat("SEEN_FILTER_ERROR_RATE"),
        expansion=settings.getint("SEEN_FILTER_EXPANSION"),
    )


def _record_shard_count(client: Client, base_key: str, shards: int) -> None:
    """Record the number of shards of ``base_key``'s filter, or refuse another number.

    A key's shard depends on N, so a filter filled with one N and read with another would
    answer "new" for most keys seen before: the crawl would start over without saying so.
    """
    if shards > 1 and client.exists(base_key):
        raise RedisSetupError(
            f"seen filter {base_key!r} at {describe(client)} was filled as one key, but "
            f"SEEN_FILTER_SHARDS is {shards}: keys seen before would count as new. Set "
            f"SEEN_FILTER_SHARDS=1, or delete {base_key!r} to start over."
        )
    record = f"{base_key}:shards"
    previous = client.set(record, shards, nx=True, get=True)
    if previous is None:
        return
    if int(previous) != shards:
        raise RedisSetupError(
            f"seen filter {base_key!r} at {describe(client)} is split into {int(previous)} "
            f"shards, but SEEN_FILTER_SHARDS is {shards}: keys seen before would count as new. "
            f"Set SEEN_FILTER_SHARDS={int(previous)}, or delete {record!r} and the filter's "
            "keys to start over."
        )
