"""The shared frontier's own work per worker, on one Redis and on a 3-master Redis Cluster
with the crawl's queue in one partition and split over three (``FRONTIER_PARTITIONS``).

No HTTP: worker processes drive :class:`RedisFrontier` as a crawl does (lease
``--lease-batch`` requests, answer each with its page's links, until the crawl is drained)
over a synthetic site of ``--pages`` pages on ``--hosts`` hosts, each page linking to
``--new`` pages not seen yet and ``--links`` minus that to random pages (mostly seen). So the
figures are what the frontier itself can carry: the upper bound a worker's downloads never
reach. Printed per setup, for 1 and ``--workers`` workers:

- pages/s and keys/s (links checked against the seen filter) per worker, wall clock;
- pages per CPU-second, the workers' CPU and every Redis server's together (``INFO cpu``),
  which other load on the machine does not inflate the way it does wall-clock rates;
- the queue's bytes per master at the crawl's peak backlog (``MEMORY USAGE`` of each
  partition's keys after seeding every page's first links).

Everything runs on this machine: the cluster's masters share its cores with the workers, so
the cluster rows show the cost of partitions and shards, not the gain of more machines.

    .venv/bin/python -m bench.partitions [--pages 3000] [--workers 2]
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import multiprocessing.synchronize
import os
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass

from scrapy import Request
from scrapy.crawler import Crawler
from scrapy.settings import Settings
from scrapy.statscollectors import MemoryStatsCollector

from bloom_frontier.frontier.redis import RedisFrontier
from bloom_frontier.frontier.redis.state import queue_keys
from bloom_frontier.spiders.site import SiteSpider
from tests.cluster import RedisClusterServers
from tests.servers import RedisServer


@dataclass(frozen=True)
class Setup:
    label: str
    url: str
    nodes: list[RedisServer]
    partitions: int
    shards: int


@dataclass(frozen=True)
class Site:
    pages: int
    hosts: int
    links: int
    new: int

    def url(self, page: int) -> str:
        return f"https://host{page % self.hosts}.example/p/{page}"

    def links_of(self, page: int) -> list[str]:
        """Page ``page``'s links: its ``new`` children first, then random pages."""
        children = range(page * self.new + 1, min(page * self.new + self.new + 1, self.pages))
        rng = random.Random(page)
        others = [rng.randrange(self.pages) for _ in range(self.links - len(children))]
        return [self.url(link) for link in (*children, *others)]


@dataclass(frozen=True)
class Run:
    """One worker's share of a crawl."""

    pages: int
    keys: int
    seconds: float
    cpu: float


def frontier(url: str, partitions: int, shards: int, lease_batch: int) -> RedisFrontier:
    settings = Settings()
    settings.setmodule("bloom_frontier.defaults")
    settings.setdict(
        {
            "REDIS_URL": url,
            "FRONTIER_PARTITIONS": partitions,
            "SEEN_FILTER_SHARDS": shards,
            "SEEN_FILTER_CAPACITY": 1_000_000,
            "FRONTIER_LEASE_BATCH": lease_batch,
        }
    )
    stats = MemoryStatsCollector(Crawler(SiteSpider, settings))
    return RedisFrontier.from_settings(settings, "bench", stats)


def _worker(
    shape: tuple[str, int, int],
    site: Site,
    lease_batch: int,
    start: multiprocessing.synchronize.Barrier,
    runs: multiprocessing.Queue[Run],
) -> None:
    """One worker process: lease and answer pages until the crawl is drained."""
    logging.getLogger("bloom_frontier").setLevel(logging.ERROR)
    worker = frontier(*shape, lease_batch)
    start.wait(timeout=120)
    started, cpu = time.perf_counter(), time.process_time()
    pages = keys = 0
    while True:
        leased = worker.lease(lease_batch)
        if not leased:
            if worker.is_drained():
                break
            time.sleep(0.005)
            continue
        for page in leased:
            links = site.links_of(int(page.url.rsplit("/", 1)[1]))
            worker.admit(page, [Request(link) for link in links])
            pages, keys = pages + 1, keys + len(links)
    runs.put(Run(pages, keys, time.perf_counter() - started, time.process_time() - cpu))
    worker.close()


def redis_cpu(nodes: Sequence[RedisServer]) -> float:
    """CPU seconds the servers have used so far, all nodes together."""
    total = 0.0
    for node in nodes:
        with node.client() as client:
            info = client.info("cpu")
        total += float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
    return total


def queue_bytes(worker: RedisFrontier) -> list[int]:
    """Bytes each partition's keys hold (its lanes included, the seen filter aside)."""
    client = worker.client
    return [
        sum(int(client.memory_usage(key, samples=0) or 0) for key in queue_keys(client, keys))
        for keys in worker.partitions.keys
    ]


def crawl(setup: Setup, site: Site, workers: int, lease_batch: int) -> tuple[list[Run], float]:
    """Crawl ``site`` with ``workers`` processes from a fresh Redis; their runs and the
    servers' CPU seconds."""
    for node in setup.nodes:
        with node.client() as client:
            client.flushall()
    shape = (setup.url, setup.partitions, setup.shards)
    seeder = frontier(*shape, lease_batch)
    seeder.admit(None, [Request(site.url(0))])
    seeder.close()
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(workers)
    runs: multiprocessing.Queue[Run] = context.Queue()
    processes = [
        context.Process(target=_worker, args=(shape, site, lease_batch, start, runs))
        for _ in range(workers)
    ]
    for process in processes:
        process.start()
    cpu = redis_cpu(setup.nodes)
    done = [runs.get(timeout=1800) for _ in processes]
    cpu = redis_cpu(setup.nodes) - cpu
    for process in processes:
        process.join()
    return done, cpu


def backlog_bytes(setup: Setup, site: Site) -> list[int]:
    """Bytes of each partition's queue holding every page but the first, queued."""
    for node in setup.nodes:
        with node.client() as client:
            client.flushall()
    worker = frontier(setup.url, setup.partitions, setup.shards, 16)
    urls = [site.url(page) for page in range(1, site.pages)]
    for offset in range(0, len(urls), 500):
        worker.admit(None, [Request(url) for url in urls[offset : offset + 500]])
    held = queue_bytes(worker)
    worker.close()
    return held


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=3000, help="pages of the synthetic site")
    parser.add_argument("--hosts", type=int, default=30, help="hosts they are spread over")
    parser.add_argument("--links", type=int, default=50, help="links per page")
    parser.add_argument("--new", type=int, default=3, help="of which pages not seen yet")
    parser.add_argument("--workers", type=int, default=2, help="concurrent worker processes")
    parser.add_argument("--lease-batch", type=int, default=16, help="FRONTIER_LEASE_BATCH")
    args = parser.parse_args(argv)
    logging.getLogger("bloom_frontier").setLevel(logging.ERROR)  # no per-worker setup warnings
    site = Site(args.pages, args.hosts, args.links, args.new)
    print(
        f"{args.pages:,} pages on {args.hosts} hosts, {args.links} links a page ({args.new} "
        f"new); leases of {args.lease_batch}; {multiprocessing.cpu_count()} CPU cores for "
        f"everything, load average {os.getloadavg()[0]:.1f} at the start"
    )
    rows = []
    with RedisServer(bloom=True) as server, RedisClusterServers(masters=3) as cluster:
        setups = [
            Setup("one redis-server, 1 partition", server.url, [server], 1, 1),
            Setup("3-master cluster, 1 partition", cluster.url, cluster.nodes, 1, 3),
            Setup("3-master cluster, 3 partitions", cluster.url, cluster.nodes, 3, 3),
        ]
        for setup in setups:
            for workers in sorted({1, args.workers}):
                runs, cpu = crawl(setup, site, workers, args.lease_batch)
                rows.append((setup, workers, runs, cpu))
            backlog = backlog_bytes(setup, site)
            print(
                f"  {setup.label}: backlog of {args.pages - 1:,} requests, bytes per "
                f"partition {backlog} ({sum(backlog) / (args.pages - 1):,.0f} B per request)"
            )
        load = os.getloadavg()[0]
    print(
        f"\n{'setup':<32} {'workers':>7} {'pages':>6} {'pages/s/worker':>15} "
        f"{'keys/s/worker':>14} {'pages/CPU-s':>12} {'vs anchor':>10}"
    )
    anchor = None
    for setup, workers, runs, cpu in rows:
        pages = sum(run.pages for run in runs)
        per_worker = [run.pages / run.seconds for run in runs]
        keys_per_worker = [run.keys / run.seconds for run in runs]
        per_cpu = pages / (sum(run.cpu for run in runs) + cpu)
        anchor = anchor or per_cpu
        print(
            f"{setup.label:<32} {workers:>7} {pages:>6} "
            f"{sum(per_worker) / len(runs):>15,.0f} {sum(keys_per_worker) / len(runs):>14,.0f} "
            f"{per_cpu:>12,.0f} {per_cpu / anchor:>9.2f}x"
        )
    print(f"\nload average {load:.1f} at the end")


if __name__ == "__main__":
    main()
