"""One crawl's queue split over partitions (``FRONTIER_PARTITIONS``), on one redis-server and
on the suite's 3-master Redis Cluster: hosts assigned to the least-loaded partition once, one
host never in two partitions, leases drawn fairly from every partition, a worker killed in the
middle of a multi-partition admission losing nothing, commands that read every partition, and
the default of one partition leaving the layout as it was."""

from __future__ import annotations

import json
import random
import re
import threading
import time
import zlib
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from scrapy import Request

from bloom_frontier.frontier.politeness import HostLimits
from bloom_frontier.frontier.redis import RedisFrontier
from bloom_frontier.frontier.redis.layout import FrontierKeys, partition_prefixes
from bloom_frontier.frontier.redis.partitions import partition_count, partition_keys
from bloom_frontier.frontier.reset import crawl_keys, reset_crawl
from bloom_frontier.frontier.status import read_status
from bloom_frontier.redis_client import RedisSetupError
from bloom_frontier.seen.rebuild import redis_frontier_urls
from tests.cluster import RedisClusterServers
from tests.lease_clock import EXPIRING_LEASE_TTL, wait_until_expired
from tests.test_frontier_redis import stat, urls
from tests.test_frontier_sharded import MakeWorker, WorkerKilled, make_worker, worker_factory
from tests.test_learning_stale import Loop
from tests.test_quarantine import documented_acl_user, inject, scrapy

PARTITIONS = 3
HOSTS = [f"host{i}.example" for i in range(30)]


@pytest.fixture
def workers(redis_url: str) -> Iterator[MakeWorker]:
    """Workers of one crawl on the session's redis-server (emptied)."""
    yield from worker_factory(redis_url, shards=1, FRONTIER_PARTITIONS=PARTITIONS)


@pytest.fixture
def cluster_workers(redis_cluster: RedisClusterServers) -> Iterator[MakeWorker]:
    """Workers of one crawl on the session's 3-master cluster (emptied)."""
    redis_cluster.flushall()
    yield from worker_factory(redis_cluster.url, shards=1, FRONTIER_PARTITIONS=PARTITIONS)


def pages(host: str, *paths: str) -> list[Request]:
    return [Request(f"https://{host}/{path}") for path in paths]


def host_of(request: Request) -> str:
    return request.url.split("/")[2]


def hosts_by_partition(worker: RedisFrontier) -> list[set[str]]:
    """The hosts of the requests each partition holds (queued or leased), read from Redis:
    the lanes (``<level>|<host>``) its queue ranks and its leased requests came from."""
    client = worker.client
    return [
        {
            lane.decode().split("|", 1)[1]
            for lane in [*client.zrange(keys.queue, 0, -1), *client.hvals(keys.lanes)]
        }
        for keys in worker.partitions.keys
    ]


# --- assignment ------------------------------------------------------------------------


def test_hashing_30_hosts_onto_3_partitions_is_often_uneven() -> None:
    """Why hosts are assigned rather than hashed: for random sets of 30 hosts, a hash puts
    one partition more than 25 % off even in most of them."""
    rng = random.Random(12)
    uneven = 0
    for _ in range(1000):
        hosts = [f"{rng.getrandbits(64):x}.example" for _ in range(30)]
        loads = Counter(zlib.crc32(host.encode()) % 3 for host in hosts)
        uneven += any(abs(loads[part] - 10) > 2.5 for part in range(3))
    assert uneven > 500


def test_hosts_go_to_the_least_loaded_partition_and_every_worker_agrees(
    workers: MakeWorker,
) -> None:
    first, second = workers(), workers()
    # Two workers see the hosts in different orders, at the same time.
    order = HOSTS[:]
    random.Random(3).shuffle(order)
    answers: dict[str, list[int]] = {}

    def assign(name: str, worker: RedisFrontier, hosts: list[str]) -> None:
        answers[name] = [part for host in hosts for part in worker.partitions.of_hosts([host])]

    threads = [
        threading.Thread(target=assign, args=("first", first, HOSTS)),
        threading.Thread(target=assign, args=("second", second, order)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    by_first = dict(zip(HOSTS, answers["first"], strict=True))
    assert dict(zip(order, answers["second"], strict=True)) == by_first
    assert Counter(by_first.values()) == dict.fromkeys(range(PARTITIONS), 10)
    # A third worker started later reads the same assignment.
    assert workers().partitions.of_hosts(HOSTS) == [by_first[host] for host in HOSTS]


def test_a_mangled_assignment_is_assigned_again(workers: MakeWorker) -> None:
    worker = workers()
    worker.client.hset(worker.keys.host_partition, "a.example", "seven")
    worker.client.hset(worker.keys.partition_hosts, "0", "not a count")
    part = worker.partitions.of_host("a.example")
    assert 0 <= part < PARTITIONS
    assert int(worker.client.hget(worker.keys.host_partition, "a.example")) == part


def test_one_host_is_never_in_two_partitions(workers: MakeWorker) -> None:
    """Pages of every host link to pages of every host, answered by two workers at once."""
    first, second = workers(), workers()
    first.admit(None, [page for host in HOSTS for page in pages(host, "")])

    def crawl(worker: RedisFrontier, rounds: int) -> None:
        rng = random.Random(id(worker))
        for _ in range(rounds):
            for page in worker.lease(8):
                links = [Request(f"https://{rng.choice(HOSTS)}/{rng.randrange(200)}")]
                worker.admit(page, links * 3)

    threads = [threading.Thread(target=crawl, args=(worker, 15)) for worker in (first, second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    held = hosts_by_partition(first)
    assert sum(map(len, held)) == len(set().union(*held))  # no host in two partitions
    assert all(held)  # every partition holds requests of some hosts
    recorded = {
        host.decode(): int(part)
        for host, part in first.client.hgetall(first.keys.host_partition).items()
    }
    assert len(recorded) == len(HOSTS)
    for index, hosts in enumerate(held):
        assert all(recorded[host] == index for host in hosts)


# --- leasing ---------------------------------------------------------------------------


def test_leases_rotate_over_the_partitions_so_none_starves(workers: MakeWorker) -> None:
    worker = workers()
    # The first host's partition gets 60 requests, the others 3 each.
    busy, *quiet = HOSTS[:PARTITIONS]
    assert worker.partitions.of_hosts(HOSTS[:PARTITIONS]) == list(range(PARTITIONS))
    worker.admit(None, pages(busy, *map(str, range(60))))
    for host in quiet:
        worker.admit(None, pages(host, "a", "b", "c"))
    calls = [worker.lease(2) for _ in range(PARTITIONS)]
    # Each of the first N calls started at another partition: each partition's host leads one.
    assert sorted(host_of(call[0]) for call in calls) == sorted(HOSTS[:PARTITIONS])
    leased = [request for call in calls for request in call]
    for _ in range(3):
        leased += worker.lease(2)
    counts = Counter(map(host_of, leased))
    # Every quiet partition was drained while the busy one still had most of its requests.
    assert all(counts[host] == 3 for host in quiet)
    assert counts[busy] == len(leased) - 6 < 60


def test_a_lease_call_fills_up_from_the_next_partitions(workers: MakeWorker) -> None:
    worker = workers()
    for host in HOSTS[:PARTITIONS]:
        worker.admit(None, pages(host, "a"))
    assert len(worker.lease(10)) == PARTITIONS  # one call gathered every partition's request
    assert worker.leases.shared_sizes == (0, PARTITIONS)


# --- admission -------------------------------------------------------------------------


def kill_before(worker: RedisFrontier, script: str, partition: int | None = None) -> None:
    """Make ``worker`` die the moment it would run ``script`` (in ``partition``, or any)."""

    def killed(*args: Any, **kwargs: Any) -> None:
        raise WorkerKilled

    for index, scripts in enumerate(worker.partitions.scripts):
        if partition is None or index == partition:
            scripts._scripts[script] = killed  # type: ignore[assignment]


def spanning_links(worker: RedisFrontier, parent_host: str) -> tuple[list[Request], list[int]]:
    """Links to a host of each partition, the parent's host last; and their partitions."""
    links = [page for host in HOSTS[:PARTITIONS] for page in pages(host, "new")]
    links += pages(parent_host, "sibling")
    return links, worker.partitions.of_hosts([host_of(link) for link in links])


def test_a_page_whose_links_span_partitions_queues_each_in_its_host_partition(
    workers: MakeWorker,
) -> None:
    worker = workers()
    worker.admit(None, pages(HOSTS[0], ""))
    [home] = worker.lease(1)
    links, parts = spanning_links(worker, HOSTS[0])
    assert sorted(parts[:PARTITIONS]) == list(range(PARTITIONS))
    assert urls(worker.admit(home, links + links)) == urls(links)
    assert worker.counts() == {"queued": 4, "leased": 0, "failed": 0, "seen": 5}
    held = hosts_by_partition(worker)
    for link, part in zip(links, parts, strict=True):
        assert host_of(link) in held[part]
    leased = []
    while len(leased) < 4 and (more := worker.lease(4)):
        leased += more
    assert sorted(urls(leased)) == sorted(urls(links))
    for page in leased:
        worker.admit(page, [])
    assert worker.is_drained()


@pytest.mark.parametrize("step", ["stage", "commit"])
def test_worker_killed_mid_admission_across_partitions_loses_nothing(
    redis_url: str, workers: MakeWorker, step: str
) -> None:
    """Killed after staging some parts, or after marking the keys and committing some: the
    staged parts expire and are queued whole; the parent, its lease released last, is not
    lost either: fetched again (and its links found again) at worst."""
    doomed = make_worker(redis_url, 1, EXPIRING_LEASE_TTL, FRONTIER_PARTITIONS=PARTITIONS)
    other = workers(lease_ttl=EXPIRING_LEASE_TTL)
    other.admit(None, pages(HOSTS[0], ""))
    [home] = doomed.lease(1)
    links, _ = spanning_links(doomed, HOSTS[0])
    home_part = doomed.partitions.split(home.meta["frontier_lease"])[0]
    # Die at the second partition's step: one part done, the others not.
    victim = next(part for part in range(PARTITIONS) if part != home_part)
    kill_before(doomed, step, victim)
    with pytest.raises(WorkerKilled):
        doomed.admit(home, links)
    doomed.client.close()

    assert not other.is_drained()
    wait_until_expired(other)
    fetched: list[str] = []
    deadline = time.monotonic() + 10
    while not other.is_drained() and time.monotonic() < deadline:
        for page in other.lease(10):
            fetched.append(page.url)
            other.admit(page, links if page.url == home.url else [])
        time.sleep(0.05)
    assert other.is_drained()
    # Every link fetched; the home page at most once more.
    assert set(urls(links)) <= set(fetched)
    assert Counter(fetched)[home.url] <= 1
    assert other.counts()["failed"] == 0


def test_a_refused_parent_lease_stages_nothing_anywhere(workers: MakeWorker) -> None:
    slow, other = workers(lease_ttl=EXPIRING_LEASE_TTL), workers(lease_ttl=EXPIRING_LEASE_TTL)
    slow.admit(None, pages(HOSTS[0], ""))
    [page] = slow.lease(1)
    wait_until_expired(slow)
    [again] = other.lease(1)
    links, _ = spanning_links(slow, HOSTS[0])
    assert slow.admit(page, links) == []
    assert stat(slow, "frontier/ack_refused") == 1
    assert all(not slow.client.hlen(keys.staged) for keys in slow.partitions.keys)
    assert urls(other.admit(again, links)) == urls(links)


# --- layout, settings, commands ----------------------------------------------------------


def test_one_partition_is_the_plain_layout(workers: MakeWorker) -> None:
    worker = workers(FRONTIER_PARTITIONS=1)
    assert worker.partitions.keys == [FrontierKeys.for_prefix("{example}")]
    assert worker.scripts is worker.partitions.scripts[0]
    worker.admit(None, pages(HOSTS[0], "", "a"))
    [home] = worker.lease(1)
    # A plain request id, as the lease script makes it (no partition after it).
    assert re.fullmatch("[0-9a-f]{14}", home.meta["frontier_lease"])
    worker.admit(home, pages(HOSTS[1], "b"))
    stored = {key.decode() for key in worker.client.scan_iter("*")}
    assert all(key.startswith("{example}:") for key in stored)
    assert worker.keys.partitions not in stored
    assert worker.keys.host_partition not in stored  # no assignment with one partition


def test_partitions_spread_over_every_master(
    cluster_workers: MakeWorker, redis_cluster: RedisClusterServers
) -> None:
    first, second = cluster_workers(), cluster_workers()
    first.admit(None, [page for host in HOSTS for page in pages(host, "")])
    for page in second.lease(PARTITIONS):
        second.admit(page, pages(host_of(page), "next"))
    holders = [redis_cluster.node_holding(keys.queue).port for keys in first.partitions.keys]
    assert sorted(holders) == sorted(redis_cluster.ports)
    assert first.counts() == {"queued": 30, "leased": 0, "failed": 0, "seen": 33}
    assert partition_prefixes("{example}", PARTITIONS) == tuple(
        keys.prefix for keys in first.partitions.keys
    )


def test_another_number_of_partitions_is_refused(workers: MakeWorker) -> None:
    first = workers()
    first.admit(None, pages(HOSTS[0], ""))
    with pytest.raises(RedisSetupError, match="split into 3 partitions, but FRONTIER_PARTITIONS"):
        workers(FRONTIER_PARTITIONS=2)
    with pytest.raises(RedisSetupError, match="split into 3 partitions"):
        workers(FRONTIER_PARTITIONS=1)
    assert len(workers().lease(1)) == 1  # the same crawl, still whole


def test_status_reset_and_failures_see_every_partition(
    workers: MakeWorker, redis_client: redis.Redis
) -> None:
    worker = workers()
    worker.admit(None, [page for host in HOSTS[:6] for page in pages(host, "", "a")])
    leased = worker.lease(3)
    worker.fail(leased[0], "gone")
    status = read_status(redis_client, "{example}", 0.001, HostLimits())
    assert (status.queued, status.leased, status.failed) == (9, 2, 1)
    # The lease call took its 3 from the first partition in turn.
    assert status.partitions_queued == [1, 4, 4]
    assert "partitions: 1, 4, 4" in status.render()
    assert list(worker.failures()) == [leased[0].url]
    keys = FrontierKeys.for_prefix("{example}")
    assert len(partition_keys(redis_client, keys)) == PARTITIONS
    worker.release_all()
    found = set(crawl_keys(redis_client, keys))
    for part in worker.partitions.keys:
        assert part.queue in found
    assert reset_crawl(redis_client, keys) == len(found)
    assert not list(redis_client.scan_iter("*example*"))


def test_the_documented_acl_lets_a_partitioned_worker_crawl(redis_url: str) -> None:
    """The ACL line of docs/security.md names the partitions' keys too."""
    with redis.Redis.from_url(redis_url) as admin:
        admin.flushall()
    with documented_acl_user(redis_url) as user_url:
        worker = make_worker(
            user_url, 1, 60.0, FRONTIER_PARTITIONS=PARTITIONS, FRONTIER_KEY_PREFIX="{site}"
        )
        try:
            worker.admit(None, [page for host in HOSTS[:PARTITIONS] for page in pages(host, "")])
            leased = worker.lease(10)
            assert len(leased) == PARTITIONS
            for page in leased:
                worker.admit(page, pages(host_of(page), "next"))
            assert worker.counts()["queued"] == PARTITIONS
        finally:
            worker.close()


def test_rebuild_filter_reads_the_requests_of_every_partition(workers: MakeWorker) -> None:
    worker = workers()
    queued = [page for host in HOSTS[:6] for page in pages(host, "", "a")]
    worker.admit(None, queued)
    [leased] = worker.lease(1)
    worker.fail(leased, "gone")
    assert sorted(redis_frontier_urls(worker.client, "{example}")) == sorted(urls(queued))


def test_backoff_pauses_a_host_in_its_partition_for_every_worker(workers: MakeWorker) -> None:
    first, second = workers(), workers()
    paused, other = HOSTS[0], HOSTS[1]
    first.admit(None, pages(paused, "a") + pages(other, "a"))
    assert first.politeness.pause(paused, 30) > 29
    part = second.partitions.keys_of(paused)
    assert second.client.zscore(part.host_paused, paused) is not None
    assert second.politeness.paused_for(paused) > 29
    assert [host_of(page) for page in second.lease(10)] == [other]
    assert second.politeness.strike(paused) == 1
    assert second.client.hget(part.host_strikes, paused) == b"1"


def test_frontier_command_shows_and_takes_partition_qualified_quarantine_ids(
    redis_url: str, workers: MakeWorker
) -> None:
    worker = workers(FRONTIER_KEY_PREFIX="{site}")
    for index in (1, 2):
        inject(worker.client, worker.partitions.keys[index], b"{not json")
    assert worker.lease(10) == []
    settings = ("-s", f"REDIS_URL={redis_url}")
    status = scrapy("frontier", "site", *settings)
    assert "quarantined: 2 (see --quarantine)" in status.stdout, status.stderr
    listed = scrapy("frontier", "site", "--quarantine", "--json", *settings)
    ids = [json.loads(line)["id"] for line in listed.stdout.splitlines()]
    assert ids == ["00000000000001@1", "00000000000001@2"]
    dropped = scrapy("frontier", "site", "--drop-quarantined", ids[1], *settings)
    assert dropped.stdout.strip() == "1 dropped"
    assert worker.client.hlen(worker.partitions.keys[1].quarantine) == 1
    assert worker.client.hlen(worker.partitions.keys[2].quarantine) == 0


def test_no_warning_when_partitions_land_on_every_master(
    cluster_workers: MakeWorker, caplog: pytest.LogCaptureFixture
) -> None:
    """The suite's cluster splits its slots evenly (``redis-cli --cluster create``)."""
    cluster_workers(FRONTIER_PARTITIONS=6)
    assert "land on" not in caplog.text


def test_a_warning_names_partitions_crowded_on_one_master(
    redis_cluster: RedisClusterServers,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Slots split unevenly (here: every partition's slot answered by one master)."""
    redis_cluster.flushall()
    client = redis_cluster.cluster_client()
    first = client.get_primaries()[0]
    monkeypatch.setattr(client, "get_node_from_key", lambda key: first)
    partition_count(client, FrontierKeys.for_prefix("{example}"), PARTITIONS)
    assert f"land on 1 of the cluster's 3 masters ({first.name}: 3)" in caplog.text
    client.close()


def test_a_crawl_queued_without_partitions_refuses_partitions(workers: MakeWorker) -> None:
    """Its queue is in the crawl's own keys, which partitioned workers never read."""
    plain = workers(FRONTIER_PARTITIONS=1)
    plain.admit(None, pages(HOSTS[0], "", "a"))
    with pytest.raises(RedisSetupError, match="queued or leased without partitions"):
        workers()
    assert plain.client.get(plain.keys.partitions) is None  # nothing recorded
    assert [request.url for request in workers(FRONTIER_PARTITIONS=1).lease(2)] == urls(
        pages(HOSTS[0], "", "a")
    )


def test_a_mangled_partition_count_is_a_clear_error(workers: MakeWorker) -> None:
    worker = workers()
    worker.client.set(worker.keys.partitions, "three")
    with pytest.raises(RedisSetupError, match="holds 'three', not a number of partitions"):
        workers()
    with pytest.raises(RedisSetupError, match="not a number of partitions"):
        partition_keys(worker.client, worker.keys)
    worker.admit(None, pages(HOSTS[0], ""))
    assert reset_crawl(worker.client, worker.keys) > 0  # the way out the error names
    assert not list(worker.client.scan_iter("*example*"))


def test_the_heartbeat_keeps_a_workers_leases_in_every_partition(workers: MakeWorker) -> None:
    """A living worker's leases stay its own in each partition, whatever it is doing with
    them: one granted but not taken by the loop yet, one held, one whose answer waits in
    the outbox (the background thread has not sent it)."""
    busy, other = workers(lease_ttl=1.0), workers(lease_ttl=1.0)
    assert busy.partitions.of_hosts(HOSTS[:PARTITIONS]) == list(range(PARTITIONS))
    for host in HOSTS[:PARTITIONS]:
        busy.admit(None, pages(host, "a"))
    answered, held = busy.lease(2)
    arriving = busy.leases.lease_replies(1)  # granted in Redis, not yet taken by the loop
    loop = Loop()
    busy.outbox.background = loop  # type: ignore[assignment]
    busy.admit(answered, [])
    assert busy.pending_answers == 1
    extended = busy.leases.to_extend()
    assert sorted(busy.partitions.split(lease)[0] for lease in extended) == [0, 1, 2]
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:
        busy.heartbeat()
        assert other.lease(PARTITIONS) == []
        time.sleep(0.1)
    loop.close()
    busy.outbox.background = None
    [late] = busy.leases.take_delivery(arriving)
    for page in (held, late):
        busy.admit(page, [])
    assert busy.is_drained()
    assert stat(other, "frontier/reclaimed") == 0
    assert stat(busy, "frontier/acked") == PARTITIONS
