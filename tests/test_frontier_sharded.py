"""The shared frontier with a sharded seen filter (``SEEN_FILTER_SHARDS > 1``), on one
redis-server and on a real 3-master Redis Cluster: the filter's shards spread over the
masters while the queue stays on one slot, workers agree on what is new, and a worker that
dies between marking keys seen and queueing them loses no request."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from redis.crc import key_slot
from scrapy import Request
from scrapy.utils.test import get_crawler

import bloom_frontier.defaults as project_settings
from bloom_frontier.frontier.redis import RedisFrontier
from bloom_frontier.redis_client import RedisSetupError
from tests.cluster import RedisClusterServers
from tests.lease_clock import EXPIRING_LEASE_TTL, wait_until_expired
from tests.test_frontier_redis import FRONTIER_SETTINGS, ExampleSpider, stat, urls

SHARDS = 6

MakeWorker = Callable[..., RedisFrontier]


class WorkerKilled(BaseException):
    """Stands for a SIGKILL: nothing the worker meant to do after it happens."""


def make_worker(url: str, shards: int, lease_ttl: float, **more: Any) -> RedisFrontier:
    """A worker of the crawl at ``url``; ``more`` settings (e.g. ``FRONTIER_PARTITIONS``)."""
    settings = {name: getattr(project_settings, name) for name in FRONTIER_SETTINGS}
    settings.update(REDIS_URL=url, FRONTIER_LEASE_TTL=lease_ttl, SEEN_FILTER_SHARDS=shards)
    settings.update(more)
    crawler = get_crawler(ExampleSpider, settings)
    spider = ExampleSpider.from_crawler(crawler)
    assert crawler.stats is not None
    return RedisFrontier.from_settings(crawler.settings, spider.name, crawler.stats, spider)


def worker_factory(url: str, shards: int = SHARDS, **defaults: Any) -> Iterator[MakeWorker]:
    """Makes workers of the crawl at ``url`` (``defaults``: more settings), closed after."""
    made: list[RedisFrontier] = []

    def make(shards: int = shards, lease_ttl: float = 60.0, **more: Any) -> RedisFrontier:
        made.append(make_worker(url, shards, lease_ttl, **{**defaults, **more}))
        return made[-1]

    yield make
    for worker in made:
        worker.close()


@pytest.fixture
def workers(redis_url: str) -> Iterator[MakeWorker]:
    """Workers of one crawl on the session's redis-server (emptied)."""
    yield from worker_factory(redis_url)


@pytest.fixture
def cluster_workers(redis_cluster: RedisClusterServers) -> Iterator[MakeWorker]:
    """Workers of one crawl on the session's 3-master cluster (emptied)."""
    redis_cluster.flushall()
    yield from worker_factory(redis_cluster.url)


def links(*paths: str) -> list[Request]:
    return [Request(f"https://example.com/{path}") for path in paths]


def kill_before(worker: RedisFrontier, script: str) -> None:
    """Make ``worker`` die the moment it would run ``script``."""

    def killed(*args: Any, **kwargs: Any) -> None:
        raise WorkerKilled

    worker.scripts._scripts[script] = killed  # type: ignore[assignment]


def crawl_two_workers(first: RedisFrontier, second: RedisFrontier) -> None:
    """Two workers start the same crawl and answer pages whose links overlap."""
    assert urls(first.admit(None, links(""))) == ["https://example.com/"]
    assert second.admit(None, links("")) == []
    [home] = second.lease(5)
    assert urls(second.admit(home, links("a", "b", "a", ""))) == urls(links("a", "b"))
    leased = first.lease(5)
    assert urls(leased) == urls(links("a", "b"))
    # Both pages link to c; only the first answer queues it.
    assert urls(first.admit(leased[0], links("c", "b"))) == urls(links("c"))
    assert urls(first.admit(leased[1], links("c", "d"))) == urls(links("d"))
    assert urls(second.lease(5)) == urls(links("c", "d"))
    assert stat(first, "seen/duplicate") + stat(second, "seen/duplicate") == 5


def test_two_workers_agree_on_new_links_on_one_redis(workers: MakeWorker) -> None:
    first, second = workers(), workers()
    crawl_two_workers(first, second)
    assert first.counts() == {"queued": 0, "leased": 2, "failed": 0, "seen": 5}


def test_on_the_cluster_shards_spread_over_every_master_and_the_queue_stays_on_one_slot(
    cluster_workers: MakeWorker, redis_cluster: RedisClusterServers
) -> None:
    first, second = cluster_workers(), cluster_workers()
    crawl_two_workers(first, second)
    shard_holders = Counter(
        redis_cluster.node_holding(shard.key).port for shard in first.seen.shards
    )
    assert shard_holders == dict.fromkeys(redis_cluster.ports, SHARDS // 3)
    frontier_slots = {key_slot(key.encode()) for key in first.keys.all}
    assert frontier_slots == {key_slot(first.keys.queue.encode())}
    stored = [key for key in first.keys.all if first.client.exists(key)]
    assert {first.keys.leases, first.keys.requests, first.keys.seq} <= set(stored)
    assert len({redis_cluster.node_holding(key).port for key in stored}) == 1
    assert not first.client.exists(first.keys.seen)  # the filter lives in the shards only
    assert first.counts() == {"queued": 0, "leased": 2, "failed": 0, "seen": 5}


@pytest.mark.parametrize("with_parent", [True, False], ids=["page-links", "start-requests"])
def test_worker_killed_after_marking_keys_seen_loses_no_request(
    redis_url: str, workers: MakeWorker, with_parent: bool
) -> None:
    doomed = make_worker(redis_url, SHARDS, EXPIRING_LEASE_TTL)
    other = workers(lease_ttl=EXPIRING_LEASE_TTL)
    other.admit(None, links("", "known"))
    parent = doomed.lease(1)[0] if with_parent else None  # the home page
    kill_before(doomed, "commit")
    with pytest.raises(WorkerKilled):
        doomed.admit(parent, links("new-1", "known", "new-2"))
    doomed.client.close()  # dead: its connection goes, nothing is flushed

    # Its keys are marked seen: any admission of them now is refused as a duplicate...
    [(_, new_key)] = other.keyer.keyed(links("new-1"))
    assert other.seen.add_many([new_key]) == [False]
    assert not other.is_drained()  # ...but the staged batch keeps the crawl open
    wait_until_expired(other)
    leased = other.lease(10)
    # Every staged request is queued, the duplicate too (which ones were new cannot be known
    # any more); the page the batch came from is not fetched again.
    expected = ["known", "new-1", "known", "new-2"] + ([] if with_parent else [""])
    assert sorted(urls(leased)) == sorted(urls(links(*expected)))
    assert stat(other, "frontier/staged_recovered") == 3
    assert stat(other, "frontier/reclaimed") == 0
    for page in leased:
        other.admit(page, [])
    assert other.is_drained()


def test_answer_refused_for_a_lease_taken_over_marks_nothing_seen(workers: MakeWorker) -> None:
    """The stale worker's links are not marked seen: the worker now holding the page
    admits them as new (had they been marked first, they would be lost)."""
    slow, other = workers(lease_ttl=EXPIRING_LEASE_TTL), workers(lease_ttl=EXPIRING_LEASE_TTL)
    slow.admit(None, links(""))
    [page] = slow.lease(1)
    wait_until_expired(slow)
    [again] = other.lease(1)
    assert slow.admit(page, links("a", "b")) == []
    assert stat(slow, "frontier/ack_refused") == 1
    assert urls(other.admit(again, links("a", "b"))) == urls(links("a", "b"))


def test_commit_after_the_lease_expired_queues_the_whole_batch(workers: MakeWorker) -> None:
    """A worker stalled between marking and committing (longer than its lease) cannot trust
    the filter's answers any more: it queues every request of the batch."""
    stalled = workers(lease_ttl=EXPIRING_LEASE_TTL)
    stalled.admit(None, links(""))
    [home] = stalled.lease(1)
    add_many = stalled.seen.add_many

    def add_many_then_stall(*args: Any, **kwargs: Any) -> list[bool]:
        answers = add_many(*args, **kwargs)
        wait_until_expired(stalled)
        return answers

    stalled.seen.add_many = add_many_then_stall  # type: ignore[method-assign]
    # The home page links to itself: seen, yet queued (fetched twice rather than risk a loss).
    assert urls(stalled.admit(home, links("new", ""))) == urls(links("new", ""))
    assert stat(stalled, "frontier/staged_recovered") == 2
    assert stat(stalled, "frontier/ack_refused") == 0
    assert urls(stalled.lease(10)) == urls(links("new", ""))


def test_retried_batch_gets_its_first_answer_from_every_shard(workers: MakeWorker) -> None:
    """A reply lost after the shards applied the batch: the retry under the same batch id
    hears "new" again, not "seen" for keys its own first attempt added."""
    worker = workers()
    keys = [key for _, key in worker.keyer.keyed(links(*map(str, range(30))))]
    assert worker.seen.add_many(keys, batch_id="batch-1") == [True] * 30
    assert worker.seen.add_many(keys, batch_id="batch-1") == [True] * 30
    assert worker.seen.add_many(keys, batch_id="batch-2") == [False] * 30


def test_pages_without_links_to_check_take_one_script(workers: MakeWorker) -> None:
    worker = workers()
    worker.admit(None, links("a", "b"))
    [first, page] = worker.lease(2)
    worker.admit(first, [])  # the script is loaded now: one call is one call
    before = worker.client.info("commandstats")
    assert worker.admit(page, []) == []
    after = worker.client.info("commandstats")
    calls = {
        name: after[name]["calls"] - before.get(name, {}).get("calls", 0)
        for name in after
        if name.startswith("cmdstat_eval")
    }
    assert sum(calls.values()) == 1
    assert worker.counts()["leased"] == 0


def test_a_crawl_filled_as_one_key_refuses_to_switch_to_shards(workers: MakeWorker) -> None:
    single = workers(shards=1)
    single.admit(None, links(""))
    with pytest.raises(RedisSetupError, match="was filled as one key"):
        workers(shards=SHARDS)
    assert single.admit(None, links("")) == []  # still the same crawl with one key
