"""The sharded seen filter on one Redis and on a 3-master Redis Cluster, all on loopback.

Starts its own redis-server with RedisBloom (the anchor) and its own 3-master cluster
(tests/cluster.py), and in one run measures, for batches of ``--batch`` keys (one page's links):

- keys/s through :class:`ShardedBloomSeenFilter` for one worker and for ``--workers``
  concurrent worker processes, with one key (the plain filter) and with N shards;
- Redis commands per batch: EVAL calls counted by the servers (``INFO commandstats``), and
  the nodes a batch touches (one pipelined round trip each, sent to all nodes at once);
- Redis bytes per request queued in the shared frontier (measured through
  :class:`RedisFrontier` itself), next to the seen filter's bytes per key;
- bytes per key per shard once the filter holds its capacity: ``BF.INFO`` size per key of
  capacity, and ``MEMORY USAGE`` per key inserted, against the optimum ``-ln(p) / ln(2)^2``
  bits.

Everything runs on this machine: the cluster's three masters share its cores with the
workers, so the cluster figures show the cost of sharding, not the gain of more machines.

    .venv/bin/python -m bench.cluster [--keys 300000] [--batch 100] [--workers 2]
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import multiprocessing.synchronize
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass

import redis
from scrapy import Request
from scrapy.crawler import Crawler
from scrapy.settings import Settings
from scrapy.statscollectors import MemoryStatsCollector

from bench.dedup import dedupe_keys
from bloom_frontier.frontier.redis import RedisFrontier
from bloom_frontier.frontier.redis.state import queued_records
from bloom_frontier.frontier.reset import glob_escape
from bloom_frontier.redis_client import redis_from_url
from bloom_frontier.seen.sharded import ShardedBloomSeenFilter
from bloom_frontier.spiders.site import SiteSpider
from tests.cluster import RedisClusterServers
from tests.servers import RedisServer

ERROR_RATE = 0.001
EXPANSION = 2


@dataclass(frozen=True)
class Setup:
    label: str
    url: str
    nodes: list[RedisServer]
    shards: int


@dataclass(frozen=True)
class Result:
    one_worker: float
    many_workers: float
    evals_per_batch: float
    nodes_per_batch: float
    bytes_per_key: list[float]
    memory_per_key: list[float]


def eval_calls(nodes: Sequence[RedisServer]) -> int:
    """EVAL commands the servers have run so far, all nodes together."""
    total = 0
    for node in nodes:
        with node.client() as client:
            stats = client.info("commandstats")
        total += int(stats.get("cmdstat_eval", {}).get("calls", 0))
    return total


def fill(url: str, name: str, shards: int, capacity: int, keys: Sequence[str], batch: int) -> None:
    seen = ShardedBloomSeenFilter(
        redis_from_url(url), name, shards, capacity, ERROR_RATE, EXPANSION, owns_client=True
    )
    for offset in range(0, len(keys), batch):
        seen.add_many(keys[offset : offset + batch])
    seen.close()


def _worker(
    url: str,
    name: str,
    shards: int,
    capacity: int,
    keys: list[str],
    batch: int,
    start: multiprocessing.synchronize.Barrier,
    spans: multiprocessing.Queue[tuple[float, float]],
) -> None:
    """One worker process: connect, wait for the others, add its keys; report when it
    started and finished adding (wall clock, comparable between processes)."""
    seen = ShardedBloomSeenFilter(
        redis_from_url(url), name, shards, capacity, ERROR_RATE, EXPANSION, owns_client=True
    )
    start.wait(timeout=120)
    started = time.time()
    for offset in range(0, len(keys), batch):
        seen.add_many(keys[offset : offset + batch])
    spans.put((started, time.time()))
    seen.close()


def concurrent_rate(setup: Setup, name: str, keys: list[str], batch: int, workers: int) -> float:
    """Keys/s of ``workers`` processes adding their shares of ``keys`` at the same time."""
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(workers)
    spans: multiprocessing.Queue[tuple[float, float]] = context.Queue()
    processes = [
        context.Process(
            target=_worker,
            args=(setup.url, name, setup.shards, len(keys), keys[n::workers], batch, start, spans),
        )
        for n in range(workers)
    ]
    for process in processes:
        process.start()
    finished = [spans.get(timeout=600) for _process in processes]
    for process in processes:
        process.join()
    return len(keys) / (max(end for _, end in finished) - min(begin for begin, _ in finished))


def nodes_touched_per_batch(seen: ShardedBloomSeenFilter, keys: Sequence[str], batch: int) -> float:
    """Mean number of distinct nodes holding the shards a batch touches."""
    client = seen.client
    node_of_shard = [
        client.get_node_from_key(shard.key).name if isinstance(client, redis.RedisCluster) else ""
        for shard in seen.shards
    ]
    batches = [keys[offset : offset + batch] for offset in range(0, len(keys), batch)]
    touched = [len({node_of_shard[seen.shard_of(key)] for key in keys}) for keys in batches]
    return sum(touched) / len(touched)


def measure(setup: Setup, keys: list[str], batch: int, workers: int, repeat: int) -> Result:
    """Figures for one setup: best of ``repeat`` runs, each on a fresh filter sized for all
    the keys (so it is full at the end)."""
    capacity = len(keys)
    one_worker = 0.0
    for run in range(repeat):
        name = f"bench:{setup.shards}:one:{run}"
        calls = eval_calls(setup.nodes)
        started = time.perf_counter()
        fill(setup.url, name, setup.shards, capacity, keys, batch)
        one_worker = max(one_worker, len(keys) / (time.perf_counter() - started))
    batches = math.ceil(len(keys) / batch)
    evals_per_batch = (eval_calls(setup.nodes) - calls - setup.shards) / batches

    seen = ShardedBloomSeenFilter(
        redis_from_url(setup.url), name, setup.shards, capacity, ERROR_RATE, EXPANSION
    )
    nodes_per_batch = nodes_touched_per_batch(seen, keys, batch)
    infos = [info for info in seen.info() if info is not None]
    bytes_per_key = [info.size_bytes / info.capacity for info in infos]
    memory_per_key = [
        int(seen.client.memory_usage(shard.key, samples=0) or 0) / info.items_inserted
        for shard, info in zip(seen.shards, infos, strict=True)
    ]
    seen.client.close()

    many_workers = max(
        concurrent_rate(setup, f"bench:{setup.shards}:many:{run}", keys, batch, workers)
        for run in range(repeat)
    )
    return Result(
        one_worker, many_workers, evals_per_batch, nodes_per_batch, bytes_per_key, memory_per_key
    )


def frontier_bytes_per_request(url: str, count: int) -> tuple[float, float, float]:
    """Queue ``count`` start requests through the real shared frontier; return Redis bytes
    per queued request (every key of the frontier but the seen filter: lanes, their index,
    the shapes table), the mean stored record length, and the mean URL length."""
    settings = Settings()
    settings.setmodule("bloom_frontier.defaults")
    settings.set("REDIS_URL", url)
    stats = MemoryStatsCollector(Crawler(SiteSpider, settings))
    frontier = RedisFrontier.from_settings(settings, "bench", stats)
    urls = [key.split("|", 1)[1] for key in dedupe_keys(count)]
    for offset in range(0, count, 1000):
        frontier.admit(None, [Request(url) for url in urls[offset : offset + 1000]])
    frontier.flush()
    client, keys = frontier.client, frontier.keys
    assert frontier.counts()["queued"] == count
    held = sum(
        int(client.memory_usage(key, samples=0) or 0)
        for key in client.scan_iter(match=f"{glob_escape(keys.prefix)}:*", count=1000)
        if not key.decode().startswith(keys.seen)
    )
    stored = [record for _lane, record in queued_records(client, keys)]
    frontier.close()
    return held / count, sum(map(len, stored)) / count, sum(map(len, urls)) / count


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=300_000, help="keys added per setup")
    parser.add_argument("--batch", type=int, default=100, help="keys per add_many (one page)")
    parser.add_argument("--workers", type=int, default=2, help="concurrent worker processes")
    parser.add_argument(
        "--shards", type=int, nargs="+", default=[3, 12], help="shard counts to try"
    )
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure; best is kept")
    parser.add_argument(
        "--queued", type=int, default=50_000, help="requests queued for the frontier's memory"
    )
    args = parser.parse_args(argv)
    keys = dedupe_keys(args.keys)
    optimum = -math.log(ERROR_RATE) / math.log(2) ** 2 / 8
    print(
        f"{args.keys:,} dedupe keys, batches of {args.batch}, error rate {ERROR_RATE}, "
        f"filter capacity = keys (full at the end); {args.workers} workers for the "
        f"concurrent figure; best of {args.repeat} runs; {multiprocessing.cpu_count()} CPU "
        f"cores for everything, load average {os.getloadavg()[0]:.1f} at the start"
    )

    with RedisServer(bloom=True) as server, RedisClusterServers(masters=3) as cluster:
        setups = [Setup("one redis-server, one key", server.url, [server], 1)]
        setups += [
            Setup(f"one redis-server, {n} shards", server.url, [server], n) for n in args.shards
        ]
        setups += [
            Setup(f"3-master cluster, {n} shards", cluster.url, cluster.nodes, n)
            for n in args.shards
        ]
        results = [
            (setup, measure(setup, keys, args.batch, args.workers, args.repeat)) for setup in setups
        ]
        per_request, json_length, url_length = frontier_bytes_per_request(server.url, args.queued)

    anchor = results[0][1]
    header = (
        f"{'setup':<30} {'1 worker':>14} {f'{args.workers} workers':>14} {'vs anchor':>10} "
        f"{'EVAL/batch':>10} {'nodes/batch':>11}"
    )
    print("\nThroughput (keys/s) and Redis work per batch:")
    print("  " + header)
    for setup, result in results:
        print(
            f"  {setup.label:<30} {result.one_worker:>14,.0f} {result.many_workers:>14,.0f} "
            f"{result.one_worker / anchor.one_worker:>9.2f}x {result.evals_per_batch:>10.2f} "
            f"{result.nodes_per_batch:>11.2f}"
        )
    print(
        f"\nBytes per key per shard, filled to capacity (optimum {optimum:.3f} B at {ERROR_RATE}):"
        "\n  reserved = BF.INFO size / capacity; held = MEMORY USAGE / keys inserted"
    )
    for setup, result in results:
        sizes = result.bytes_per_key
        memory = result.memory_per_key
        print(
            f"  {setup.label:<30} reserved {min(sizes):.3f}-{max(sizes):.3f} B/key, "
            f"held {min(memory):.3f}-{max(memory):.3f} B/key "
            f"({max(memory) / optimum:.2f}x optimum)"
        )
    print(
        f"\nShared frontier, {args.queued:,} queued requests: {per_request:,.0f} B of Redis per "
        f"request (queue, stored request, score), stored JSON {json_length:,.0f} chars for URLs "
        f"of {url_length:.0f}: {per_request / max(max(r.memory_per_key) for _, r in results):,.0f}"
        "x a key's bytes in the seen filter"
    )
    print(
        "\nA batch costs one round trip per node it touches (sent to all nodes at once by the"
        "\ncluster pipeline) and one EVAL per shard it touches; on one server, one round trip."
    )


if __name__ == "__main__":
    main()
