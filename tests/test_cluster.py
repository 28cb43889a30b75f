"""The sharded seen filter, on one Redis and on a real 3-master Redis Cluster on loopback."""

from __future__ import annotations

import random
from collections import Counter

import pytest
import redis
from redis.crc import key_slot

from bloom_frontier.redis_client import RedisSetupError, describe, redis_from_url
from bloom_frontier.seen import SeenFilter
from bloom_frontier.seen.redis import RedisBloomSeenFilter
from bloom_frontier.seen.sharded import shard_keys
from tests.cluster import RedisClusterServers
from tests.seen_support import SHARED_KEYS, open_filter, page_keys, race_to_add_shared_keys

WORKERS = 4


@pytest.fixture
def cluster_url(redis_cluster: RedisClusterServers) -> str:
    """``redis+cluster://`` URL of the session's cluster, emptied before the test."""
    redis_cluster.flushall()
    return redis_cluster.url


def test_cluster_url_gives_a_cluster_client(cluster_url: str) -> None:
    client = redis_from_url(cluster_url)
    assert isinstance(client, redis.RedisCluster)
    assert len(client.get_primaries()) == 3
    assert describe(client).startswith("redis+cluster://127.0.0.1:")
    client.close()


def test_shard_i_of_n_hashes_into_the_i_th_slot_range() -> None:
    assert shard_keys("books:seen", 1) == ["books:seen"]
    keys = shard_keys("{books}:seen", 8)
    assert keys == shard_keys("{books}:seen", 8)  # every worker computes the same names
    assert keys[0].startswith("{books:seen:0/8:")
    slots = [key_slot(key.encode()) for key in keys]
    assert [slot * 8 // 16384 for slot in slots] == list(range(8))
    # A shard's bookkeeping keys stay on its slot, so its add script is single-slot.
    assert all(key_slot(f"{key}:params".encode()) == key_slot(key.encode()) for key in keys)
    with pytest.raises(ValueError, match="SEEN_FILTER_SHARDS must be 1 to 16384"):
        shard_keys("books:seen", 0)


@pytest.mark.parametrize(("shards", "per_master"), [(3, 1), (6, 2)])
def test_shards_spread_over_every_master(
    cluster_url: str, redis_cluster: RedisClusterServers, shards: int, per_master: int
) -> None:
    seen = open_filter(cluster_url, SEEN_FILTER_SHARDS=shards)
    keys = page_keys(600)
    assert seen.add_many(keys) == [True] * 600
    holders = Counter(redis_cluster.node_holding(shard.key).port for shard in seen.shards)
    assert holders == dict.fromkeys(redis_cluster.ports, per_master)
    fills = [info.items_inserted for info in seen.info() if info is not None]
    assert len(fills) == shards
    assert sum(fills) == 600
    assert min(fills) > 600 / shards / 2  # the key hash spreads keys over the shards
    seen.client.close()


def test_a_batch_is_one_eval_per_shard_and_nothing_else(
    cluster_url: str, redis_cluster: RedisClusterServers
) -> None:
    """Round trips: each node gets the EVALs of its shards in one pipeline, and no helper
    command (redis-py would otherwise ask a node for each EVAL's keys: COMMAND GETKEYS)."""
    seen = open_filter(cluster_url, SEEN_FILTER_SHARDS=6)
    holder = [redis_cluster.node_holding(shard.key).port for shard in seen.shards]
    observers = {node.port: node.client() for node in redis_cluster.nodes}
    for observer in observers.values():
        observer.config_resetstat()
    keys = page_keys(100)
    assert seen.add_many(keys) == [True] * 100
    touched = {seen.shard_of(key) for key in keys}
    assert len(touched) == 6
    for port, observer in observers.items():
        calls = {
            name.removeprefix("cmdstat_"): stats["calls"]
            for name, stats in observer.info("commandstats").items()
            if name not in ("cmdstat_config|resetstat", "cmdstat_info")
        }
        observer.close()
        assert calls["eval"] == sum(1 for shard in touched if holder[shard] == port) == 2
        # Only what the add script itself runs: reply lookup, the Bloom insert, reply store.
        assert set(calls) == {"eval", "get", "bf.insert", "set"}
    seen.client.close()


def batches_with_repeats() -> list[list[str]]:
    """Batches of page links: repeats inside a batch, across batches, and empty batches."""
    rng = random.Random(7)
    pool = page_keys(1500)
    batches: list[list[str]] = [[]]
    for _page in range(60):
        batch = rng.sample(pool, 40)
        batch += rng.sample(batch, 5)  # the same link several times on one page
        rng.shuffle(batch)
        batches.append(batch)
    return batches


def exact_answers(batches: list[list[str]]) -> list[list[bool]]:
    seen: set[str] = set()
    answers = []
    for batch in batches:
        answer = []
        for key in batch:
            answer.append(key not in seen)
            seen.add(key)
        answers.append(answer)
    return answers


@pytest.mark.parametrize("shards", [1, 4])
def test_same_answers_as_one_filter_on_one_redis(
    redis_client: redis.Redis, redis_url: str, shards: int
) -> None:
    single = RedisBloomSeenFilter(redis_client, "single:seen", 1_000_000, 0.001)
    sharded = open_filter(redis_url, "sharded:seen", SEEN_FILTER_SHARDS=shards)
    assert isinstance(sharded, SeenFilter)
    batches = batches_with_repeats()
    expected = exact_answers(batches)
    assert [single.add_many(batch) for batch in batches] == expected
    assert [sharded.add_many(batch) for batch in batches] == expected
    sharded.client.close()


def test_same_answers_as_one_filter_on_the_cluster(cluster_url: str) -> None:
    sharded = open_filter(cluster_url, SEEN_FILTER_SHARDS=6)
    batches = batches_with_repeats()
    assert [sharded.add_many(batch) for batch in batches] == exact_answers(batches)
    sharded.client.close()


def test_one_shard_is_the_plain_filter(redis_client: redis.Redis, redis_url: str) -> None:
    plain = RedisBloomSeenFilter(redis_client, "books:seen", 1_000_000, 0.001)
    assert plain.add_many(page_keys(5)) == [True] * 5
    one_shard = open_filter(redis_url, "books:seen")
    assert [shard.key for shard in one_shard.shards] == ["books:seen"]
    assert one_shard.add_many(page_keys(6)) == [False] * 5 + [True]
    one_shard.client.close()


def test_one_shard_on_the_cluster_needs_a_hash_tag(cluster_url: str) -> None:
    with pytest.raises(
        RedisSetupError, match=r"needs a \{hash tag\} on Redis Cluster: give FRONTIER_KEY_PREFIX"
    ):
        open_filter(cluster_url, "books:seen")
    seen = open_filter(cluster_url, "{books}:seen")
    assert seen.add_many(page_keys(3) * 2) == [True] * 3 + [False] * 3
    seen.client.close()


def test_changing_the_number_of_shards_is_refused(redis_url: str) -> None:
    first = open_filter(redis_url, SEEN_FILTER_SHARDS=4)
    first.add_many(page_keys(10))
    with pytest.raises(RedisSetupError, match=r"split into 4 shards, but SEEN_FILTER_SHARDS is 8"):
        open_filter(redis_url, SEEN_FILTER_SHARDS=8)
    again = open_filter(redis_url, SEEN_FILTER_SHARDS=4)
    assert again.add_many(page_keys(10)) == [False] * 10
    first.client.close()
    again.client.close()


def test_shards_share_the_capacity_without_outgrowing_it(redis_url: str) -> None:
    """A filter filled to its capacity: no shard grows a second sub-filter (twice as big)
    because the key hash gave it a few more keys than its share."""
    seen = open_filter(redis_url, SEEN_FILTER_SHARDS=4, SEEN_FILTER_CAPACITY=20_000)
    keys = page_keys(20_000)
    for offset in range(0, len(keys), 1000):
        seen.add_many(keys[offset : offset + 1000])
    infos = [info for info in seen.info() if info is not None]
    # Not quite 20,000: a key the filter wrongly thinks it has (p = 0.1 %) is not inserted.
    assert sum(info.items_inserted for info in infos) > 20_000 * 0.998
    assert max(info.items_inserted for info in infos) > 5000  # some shard got more than 1/4
    assert [info.filters for info in infos] == [1] * 4
    assert all(5000 <= info.capacity < 5000 * 1.1 for info in infos)
    seen.client.close()


def test_concurrent_processes_get_each_key_new_exactly_once(cluster_url: str) -> None:
    exitcodes, reports = race_to_add_shared_keys(cluster_url, WORKERS, SEEN_FILTER_SHARDS=6)
    assert exitcodes == [0] * WORKERS
    assert len(reports) == WORKERS
    new_keys = [key for report in reports for key in report]
    assert sorted(new_keys) == sorted(page_keys(SHARED_KEYS))
    assert all(report for report in reports)  # every worker won some keys: they did race


# The shape of the frontier's atomic steps: move a request from the queue to the leases.
LEASE_ONE = """
local id = redis.call('LPOP', KEYS[1])
if id then redis.call('HSET', KEYS[2], id, ARGV[1]) end
return id
"""


def test_script_over_hash_tagged_keys_runs_on_one_slot(cluster_url: str) -> None:
    queue, leases = "{crawl}:queue", "{crawl}:leases"
    assert key_slot(queue.encode()) == key_slot(leases.encode())
    client = redis_from_url(cluster_url)
    client.rpush(queue, "request-1")
    assert client.eval(LEASE_ONE, 2, queue, leases, "worker-a") == b"request-1"
    assert client.hgetall(leases) == {b"request-1": b"worker-a"}
    assert client.llen(queue) == 0
    client.close()


def test_script_over_untagged_keys_is_refused_crossslot(
    cluster_url: str, redis_cluster: RedisClusterServers
) -> None:
    queue, leases = "crawl:queue", "crawl:leases"
    assert key_slot(queue.encode()) != key_slot(leases.encode())
    cluster_client = redis_from_url(cluster_url)
    cluster_client.rpush(queue, "request-1")
    # redis-py refuses before sending; the node itself refuses too when asked directly
    # (error CROSSSLOT, whose code redis-py leaves out of the message).
    with pytest.raises(redis.RedisClusterException, match="must map to the same key slot"):
        cluster_client.eval(LEASE_ONE, 2, queue, leases, "worker-a")
    node = redis_cluster.node_holding(queue)
    with (
        node.client() as direct,
        pytest.raises(redis.ResponseError, match="Keys in request don't hash to the same slot"),
    ):
        direct.eval(LEASE_ONE, 2, queue, leases, "worker-a")
    assert cluster_client.lrange(queue, 0, -1) == [b"request-1"]  # nothing was leased
    cluster_client.close()
