"""`scrapy frontier SPIDER --reset --yes`: a finished shared crawl can run again, and a
running one is never pulled from under its workers."""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import redis

from bloom_frontier.frontier.redis.layout import FrontierKeys
from bloom_frontier.frontier.reset import reset_crawl
from bloom_frontier.redis_client import redis_from_url
from tests.cluster import RedisClusterServers
from tests.httpserver import TestServer, html
from tests.seen_support import open_filter, page_keys

ROOT = Path(__file__).resolve().parent.parent
SCRAPY = [sys.executable, "-m", "scrapy.cmdline"]
SITE = {"/": html("/a", "/b"), "/a": html("/b", "/c"), "/b": html(), "/c": html("/")}


def scrapy(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SCRAPY, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False
    )


def crawl(server: TestServer, redis_url: str, tmp_path: Path, *options: str) -> None:
    result = scrapy(
        "crawl", "site", "-a", f"start_url={server.url}/", "-s", f"REDIS_URL={redis_url}",
        "-s", f"STORE_URL=sqlite:///{tmp_path / 'store.sqlite'}", *options,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]


def pages(server: TestServer) -> Counter[str]:
    return Counter(path for path in server.paths() if path != "/robots.txt")


def test_reset_lets_the_same_crawl_run_again(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    # Shards live under hash tags of their own: the reset must find them too.
    options = ("-s", "SEEN_FILTER_SHARDS=3")
    with TestServer(SITE) as server:
        crawl(server, redis_url, tmp_path, *options)
        assert pages(server) == Counter(dict.fromkeys(SITE, 1))
        crawl(server, redis_url, tmp_path, *options)
        assert pages(server) == Counter(dict.fromkeys(SITE, 1))  # all seen: nothing fetched

        unconfirmed = scrapy("frontier", "site", "--reset", "-s", f"REDIS_URL={redis_url}")
        assert unconfirmed.returncode == 1
        assert "add --yes" in unconfirmed.stderr and len(unconfirmed.stderr.splitlines()) == 1
        assert redis_client.dbsize() > 0

        reset = scrapy("frontier", "site", "--reset", "--yes", "-s", f"REDIS_URL={redis_url}")
        assert reset.returncode == 0, reset.stderr[-3000:]
        assert "keys deleted" in reset.stdout
        # The test's server holds this crawl only: nothing of it is left, shards included.
        assert redis_client.keys("*") == []

        crawl(server, redis_url, tmp_path, *options)
        assert pages(server) == Counter(dict.fromkeys(SITE, 2))


def test_reset_refused_while_a_worker_reports(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    slow = {f"/p/{i}": html(f"/p/{i + 1}") for i in range(100)}
    slow["/"] = html("/p/0")
    reset_command = ("frontier", "site", "--reset", "--yes", "-s", f"REDIS_URL={redis_url}")
    with TestServer(slow, delay=0.3) as server:
        worker = subprocess.Popen(
            [*SCRAPY, "crawl", "site", "-a", f"start_url={server.url}/",
             "-s", f"REDIS_URL={redis_url}", "-s", "FRONTIER_STATUS_INTERVAL=0.5",
             "-s", f"STORE_URL=sqlite:///{tmp_path / 'store.sqlite'}"],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while len(pages(server)) < 3 and time.monotonic() < deadline:
                time.sleep(0.2)
            refused = scrapy(*reset_command)
            assert refused.returncode == 1
            assert refused.stderr.strip().startswith("refusing to reset {site}: 1 worker(s)")
            assert len(refused.stderr.strip().splitlines()) == 1
            assert "Traceback" not in refused.stderr
            # Nothing was deleted: the seen filter and the leases' counter stay for the whole
            # crawl (``requests`` holds leased records only: empty between two leases).
            assert redis_client.exists("{site}:seen", "{site}:seq") == 2
            worker.terminate()  # a worker that stops withdraws its status
            assert worker.wait(timeout=60) == 0
        finally:
            worker.kill()
    reset = scrapy(*reset_command)
    assert reset.returncode == 0, reset.stderr[-3000:]
    assert redis_client.keys("*") == []


def test_reset_on_a_cluster_reaches_every_master(redis_cluster: RedisClusterServers) -> None:
    redis_cluster.flushall()
    keys = FrontierKeys.for_prefix("{site}")
    seen = open_filter(redis_cluster.url, keys.seen, SEEN_FILTER_SHARDS=6)
    seen.add_many(page_keys(60), batch_id="b1", reply_ttl=60)  # shards, params, replies
    client = redis_from_url(redis_cluster.url)
    client.zadd(keys.queue, {"r1": 0})
    client.hset(keys.limits, "pages", 3)
    holding = {redis_cluster.node_holding(shard.key).port for shard in seen.shards}
    assert len(holding) == 3  # the state is spread over the masters
    assert reset_crawl(client, keys) > 6
    for node in redis_cluster.nodes:
        with node.client() as node_client:
            assert node_client.dbsize() == 0
    client.close()
    seen.client.close()
