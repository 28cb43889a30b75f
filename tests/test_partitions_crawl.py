"""A crawl whose queue spans the suite's 3-master Redis Cluster (``FRONTIER_PARTITIONS=3``),
end to end: real ``scrapy crawl`` workers, a site of 30 hosts (one loopback address each),
one worker SIGKILLed mid-crawl. Asserted: what the site's servers saw (every page fetched,
pages fetched twice only within what the killed worker held) and the queue's memory on each
master, sampled during the crawl (``MEMORY USAGE`` of each partition's keys): within 25 % of
even at the peak. Figures printed (``pytest -s``)."""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from bloom_frontier.frontier.redis.layout import FrontierKeys
from bloom_frontier.frontier.redis.state import queue_keys
from tests.cluster import RedisClusterServers
from tests.httpserver import TestServer
from tests.sitegen import HostsGraph, serve_hosts
from tests.test_crash import CRAWL_TIMEOUT, Worker

pytestmark = pytest.mark.slow

GRAPH = HostsGraph(hosts=30, pages=20)
PARTITIONS = 3
DELAY = 0.05
SAMPLE_EVERY = 0.1
#: Largest share a partition's queue memory may be off the partitions' mean at the peak.
TOLERANCE = 0.25


def partition_keys() -> list[FrontierKeys]:
    keys = FrontierKeys.for_prefix("{site}")
    return [keys.partition(index, PARTITIONS) for index in range(PARTITIONS)]


class QueueMemory:
    """Samples the bytes each partition's keys take (``MEMORY USAGE key SAMPLES 0``: its
    fixed keys and the lanes its queue ranks), in a thread, until stopped; keeps the sample
    with the most bytes in all."""

    def __init__(self, client: redis.RedisCluster) -> None:
        self.client = client
        self.parts = partition_keys()
        self.peak: list[int] = [0] * PARTITIONS
        #: Requests each partition held queued at the peak.
        self.peak_queued: list[int] = [0] * PARTITIONS
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self) -> list[int]:
        client = self.client
        return [
            sum(client.memory_usage(key, samples=0) or 0 for key in queue_keys(client, part))
            for part in self.parts
        ]

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_EVERY):
            sample = self.sample()
            self.samples += 1
            if sum(sample) > sum(self.peak):
                self.peak = sample
                self.peak_queued = [int(self.client.get(part.queued) or 0) for part in self.parts]

    def __enter__(self) -> QueueMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()


def fetched_pages(servers: list[TestServer]) -> Counter[tuple[int, str]]:
    """Pages the servers answered, by (host, path)."""
    return Counter(
        (host, path)
        for host, server in enumerate(servers)
        for path in server.paths()
        if path != "/robots.txt"
    )


def leases_held(client: redis.RedisCluster, worker: Worker) -> int:
    """Requests ``worker`` (dead) may have fetched or queued again: those whose lease it
    holds, in every partition, and the links of its staged batches (a batch recovered from
    its stage is queued whole, links seen meanwhile included). Its id is in its log (none
    yet: it had not joined the crawl)."""
    found = re.findall(r"\(worker ([^,]+), leases of", worker.log.read_text())
    if not found:
        return 0
    owner = found[-1].encode()
    held = 0
    for part in partition_keys():
        for lease, holder in client.hgetall(part.owners).items():
            if holder != owner:
                continue
            held += 0 if lease.startswith(b"batch:") else 1
            if staged := client.hget(part.staged, lease):
                held += len(json.loads(staged)["entries"])
    return held


@pytest.fixture
def site() -> Iterator[list[TestServer]]:
    with serve_hosts(GRAPH, delay=DELAY) as servers:
        yield servers


def test_two_workers_one_killed_crawl_30_hosts_over_3_masters_evenly(
    site: list[TestServer], redis_cluster: RedisClusterServers, tmp_path: Path
) -> None:
    redis_cluster.flushall()
    client = redis_cluster.cluster_client()
    hosts = ",".join(GRAPH.addresses())
    extra = ["-a", f"hosts={hosts}", "-s", f"FRONTIER_PARTITIONS={PARTITIONS}"]
    extra += ["-s", "SEEN_FILTER_SHARDS=3"]
    workers = [Worker(name, site[0], redis_cluster.url, tmp_path, extra) for name in ("w1", "w2")]
    expected = GRAPH.hosts * GRAPH.pages
    with QueueMemory(client) as memory:
        for worker in workers:
            worker.start()
        deadline = time.monotonic() + CRAWL_TIMEOUT
        while len(fetched_pages(site)) < expected * 0.3 and time.monotonic() < deadline:
            time.sleep(0.05)
        killed_at = len(fetched_pages(site))
        assert killed_at < expected, "the crawl ended before the kill: slow the site down"
        workers[0].kill()
        held = leases_held(client, workers[0])
        workers[0].start()
        for worker in workers:
            assert worker.wait(deadline) == 0, worker.tail()

    hits = fetched_pages(site)
    every_page = {(host, f"/p/{i}") for host in range(GRAPH.hosts) for i in range(GRAPH.pages)}
    missing = every_page - set(hits)
    assert not missing, f"never fetched: {sorted(missing)[:20]}\n{workers[0].tail()}"
    twice = sum(count - 1 for count in hits.values())
    # Only pages whose lease the killed worker held (downloading, or answered but not yet
    # committed) are fetched again.
    assert twice <= held
    for part in partition_keys():
        assert client.zcard(part.queue) == 0
        assert client.zcard(part.leases) == 0
        assert client.hlen(part.failed) == 0
    holders = {redis_cluster.node_holding(part.seq).port for part in partition_keys()}
    assert len(holders) == PARTITIONS  # one partition per master
    assigned = Counter(int(part) for part in client.hvals("{site}:host_partition"))
    assert assigned == dict.fromkeys(range(PARTITIONS), GRAPH.hosts // PARTITIONS)

    mean = sum(memory.peak) / PARTITIONS
    spread = [round(size / mean - 1, 3) for size in memory.peak]
    print(
        f"killed w1 at {killed_at}/{expected} pages holding {held} leases; "
        f"{sum(hits.values())} fetches, {twice} again; queue memory per master at the peak "
        f"({memory.samples} samples): {memory.peak} bytes ({memory.peak_queued} requests "
        f"queued), off even by {spread}"
    )
    assert min(memory.peak_queued) >= 50  # a real queue in each, not a few empty keys
    assert all(abs(off) <= TOLERANCE for off in spread), spread
    client.close()
