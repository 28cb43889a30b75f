"""What the shared frontier's crash safety costs, and what a crash costs, measured.

Starts its own redis-server with RedisBloom (AOF on, ``appendfsync always``, as in
production) and a generated local site, and prints:

1. **Frontier cycle**: one worker handles ``--pages`` pages in-process, each with ten links
   (half of them already seen): lease a batch, then per page one atomic admit script that
   marks the links seen, queues the new ones and releases the page's lease. Anchor, in the
   same run: the same Redis work without leases nor atomicity (``ZPOPMIN`` + ``HGET`` to
   take pages, ``BF.MADD`` then a pipelined ``ZADD``/``HSET`` per page), i.e. a queue that
   loses pages when a worker dies. Pages/s for both and the ratio.
2. **Crash cost**: ``scrapy crawl site`` with two workers over the generated site, once
   undisturbed (anchor) and once with one worker SIGKILLed ``--kills`` times and restarted.
   Wall time, fetches, pages fetched twice (the killed worker's downloads in flight) and
   whether every page was fetched.

    .venv/bin/python -m bench.crash [--pages 3000] [--site-pages 300] [--kills 3]
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path

import redis
from scrapy import Request, Spider
from scrapy.utils.test import get_crawler

import bloom_frontier.defaults as project_settings
from bloom_frontier.frontier.keys import RequestKeyer
from bloom_frontier.frontier.redis import RedisFrontier
from bloom_frontier.frontier.serialize import request_to_json
from bloom_frontier.meta import DEDUPE_CHECKED_META, DEDUPE_KEY_META
from tests.servers import RedisServer
from tests.sitegen import LinkGraph, serve
from tests.test_crash import DELAY, Worker, fetches, wait_for_progress

LINKS_PER_PAGE = 10
LEASE_BATCH = 16


class BenchSpider(Spider):
    name = "bench"

    def parse(self, response: object) -> None:
        """Callback stored by name."""


def links_of(page: int) -> list[Request]:
    """Ten links: five to new pages, five to pages linked before (already seen)."""
    new = [page * 5 + j + 1 for j in range(5)]
    old = [max(0, page - j) for j in range(5)]
    return [Request(f"https://bench.example/p/{n}") for n in new + old]


def frontier_cycle(redis_url: str, pages: int) -> float:
    """Pages/s through the real frontier: lease, then one atomic admit per page."""
    settings = {
        name: getattr(project_settings, name)
        for name in dir(project_settings)
        if name.startswith(("FRONTIER_", "SEEN_FILTER_"))
    } | {"REDIS_URL": redis_url, "SEEN_FILTER_CAPACITY": pages * 10}
    crawler = get_crawler(BenchSpider, settings)
    spider = BenchSpider.from_crawler(crawler)
    assert crawler.stats is not None
    frontier = RedisFrontier.from_settings(crawler.settings, "bench", crawler.stats, spider)
    frontier.admit(None, [Request("https://bench.example/p/0")])
    done, start = 0, time.perf_counter()
    while done < pages:
        leased = frontier.lease(LEASE_BATCH)
        for request in leased:
            frontier.admit(request, links_of(int(request.url.rsplit("/", 1)[1])))
        done += len(leased)
    elapsed = time.perf_counter() - start
    frontier.close()
    return done / elapsed


def plain_queue_cycle(redis_url: str, pages: int) -> float:
    """Pages/s for the same Redis work without leases or atomic steps (the anchor)."""
    crawler = get_crawler(BenchSpider)
    assert crawler.stats is not None
    keyer = RequestKeyer(crawler.stats)
    client = redis.Redis.from_url(redis_url)
    client.execute_command("BF.RESERVE", "plain:seen", 0.001, pages * 10)
    sequence = 0

    def queue(requests: list[Request]) -> None:
        nonlocal sequence
        pairs = keyer.keyed(requests)
        fresh = client.execute_command("BF.MADD", "plain:seen", *[key for _, key in pairs])
        with client.pipeline(transaction=False) as pipe:
            for (request, key), new in zip(pairs, fresh, strict=True):
                if new:
                    sequence += 1
                    request.meta[DEDUPE_KEY_META], request.meta[DEDUPE_CHECKED_META] = (
                        key,
                        request.url,
                    )
                    pipe.zadd("plain:queue", {f"{sequence:014x}": -request.priority})
                    pipe.hset("plain:requests", f"{sequence:014x}", request_to_json(request))
            pipe.execute()

    queue([Request("https://bench.example/p/0")])
    done, start = 0, time.perf_counter()
    while done < pages:
        popped = client.zpopmin("plain:queue", LEASE_BATCH)
        ids = [member for member, _ in popped]
        texts = client.hmget("plain:requests", ids) if ids else []
        for text in texts:
            url = json.loads(text)["url"]
            queue(links_of(int(url.rsplit("/", 1)[1])))
        done += len(ids)
    elapsed = time.perf_counter() - start
    client.close()
    return done / elapsed


def crawl(graph: LinkGraph, kills: int, seed: int) -> dict[str, float]:
    """Two workers crawl ``graph``; one is SIGKILLed ``kills`` times at random moments."""
    rng = random.Random(seed)
    with (
        tempfile.TemporaryDirectory() as tmp,
        RedisServer(bloom=True, appendonly=True) as redis_server,
        serve(graph, delay=DELAY) as site,
    ):
        workers = [Worker(name, site, redis_server.url, Path(tmp)) for name in ("w1", "w2")]
        start = time.monotonic()
        for worker in workers:
            worker.start()
        deadline = time.monotonic() + 600
        if kills:
            wait_for_progress(site, 0.05, deadline)
        done_kills = 0
        while done_kills < kills:
            time.sleep(rng.uniform(0.5, 2.0))
            if not workers[0].running:
                break
            workers[0].kill()
            workers[0].start()
            done_kills += 1
        codes = [worker.wait(deadline) for worker in workers]
        hits = fetches(site)
        return {
            "seconds": time.monotonic() - start,
            "kills": done_kills,
            "fetches": sum(hits.values()),
            "twice": sum(count - 1 for count in hits.values()),
            "complete": float(set(hits) >= graph.expected_paths() and codes == [0, 0]),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=3000)
    parser.add_argument("--site-pages", type=int, default=300)
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()

    with RedisServer(bloom=True, appendonly=True) as server:
        safe = frontier_cycle(server.url, args.pages)
        plain = plain_queue_cycle(server.url, args.pages)
    print(f"Frontier cycle, {args.pages} pages x {LINKS_PER_PAGE} links, AOF fsync always:")
    print(f"  plain queue (anchor, loses pages on a crash): {plain:>9,.0f} pages/s")
    print(f"  leased frontier (atomic admit + release):     {safe:>9,.0f} pages/s")
    print(f"  ratio: {safe / plain:.2f} of the anchor's throughput")

    graph = LinkGraph(args.site_pages)
    print(f"\nCrawl of {len(graph.expected_paths())} URLs by 2 workers ({DELAY}s per answer):")
    anchor = crawl(graph, 0, args.seed)
    killed = crawl(graph, args.kills, args.seed)
    for label, run in (("undisturbed (anchor)", anchor), (f"{killed['kills']:.0f} kills", killed)):
        print(
            f"  {label:<22} {run['seconds']:6.1f} s  {run['fetches']:.0f} fetches  "
            f"{run['twice']:.0f} fetched twice  complete: {bool(run['complete'])}"
        )
    print(f"  time ratio: {killed['seconds'] / anchor['seconds']:.2f}")


if __name__ == "__main__":
    main()
