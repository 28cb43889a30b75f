"""`scrapy frontier SPIDER`: what a person watching a shared crawl sees."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import redis

from bloom_frontier.frontier.politeness import HostLimits
from bloom_frontier.frontier.status import expected_error_rate, read_status
from bloom_frontier.seen.redis import bloom_info
from bloom_frontier.seen.sharded import ShardedBloomSeenFilter
from tests.httpserver import TestServer, html

ROOT = Path(__file__).resolve().parent.parent
SCRAPY = [sys.executable, "-m", "scrapy.cmdline"]


def frontier_json(redis_url: str) -> dict:
    done = subprocess.run(
        [*SCRAPY, "frontier", "site", "--json", "-s", f"REDIS_URL={redis_url}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(done.stdout)


def test_expected_error_matches_what_the_filter_does(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    client.bf().create("f", 0.01, 1000, expansion=2)
    assert expected_error_rate(bloom_info(client, "f"), 0.01) == 0.0
    client.bf().madd("f", *[f"in-{i}" for i in range(2500)])  # two full layers, one partial
    info = bloom_info(client, "f")
    assert info is not None and info.filters == 2
    expected = expected_error_rate(info, 0.01)
    probes = client.bf().mexists("f", *[f"out-{i}" for i in range(40_000)])
    measured = sum(probes) / len(probes)
    assert 0 < expected < 0.01
    assert expected / 1.6 <= measured <= expected * 1.6


def test_status_of_a_running_crawl_and_of_a_finished_one(redis_url: str, tmp_path) -> None:
    pages = {f"/p/{i}": html(f"/p/{i + 1}", f"/p/{i + 2}") for i in range(40)}
    pages["/"] = html("/p/0")
    with TestServer(pages, delay=0.3) as server:
        worker = subprocess.Popen(
            [*SCRAPY, "crawl", "site", "-a", f"start_url={server.url}/",
             "-s", f"REDIS_URL={redis_url}", "-s", "FRONTIER_STATUS_INTERVAL=0.5",
             "-s", "CONCURRENT_REQUESTS=1", "-s", f"STORE_URL=sqlite:///{tmp_path}/s.sqlite"],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while True:
                status = frontier_json(redis_url)
                busy = [w for w in status["workers"] if w["pages_total"] >= 5]
                if busy or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            assert busy, status
            assert busy[0]["pages_per_min"] > 0
            assert status["seen_keys"] >= busy[0]["pages_total"] - 1  # robots.txt has no key
            assert worker.wait(timeout=120) == 0
        finally:
            worker.kill()
    final = frontier_json(redis_url)
    assert final["workers"] == []  # a worker that finished says so
    assert final["queued"] == 0 and final["leased"] == 0 and final["hosts_waiting"] == 0
    assert final["seen_keys"] == 43  # '/' and /p/0 ... /p/41 (/p/40 and /p/41 are 404s)
    assert 0 <= final["expected_error_rate"] < 1e-9  # 43 keys in a 1M-key filter


def test_human_output_and_missing_redis_url() -> None:
    done = subprocess.run(
        [*SCRAPY, "frontier", "site"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0
    assert "REDIS_URL" in done.stderr


def test_status_sums_a_sharded_filter(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    seen = ShardedBloomSeenFilter(client, "{site}:seen", 4, capacity=1000, error_rate=0.001)
    seen.add_many([f"https://example.com/{i}" for i in range(300)])
    status = read_status(client, "{site}", 0.001, HostLimits())
    assert status.filter_shards == 4
    assert status.seen_keys == 300
    assert status.filter_capacity >= 1000
    assert 0 < status.expected_error_rate < 0.001
    assert "in 4 shard(s)" in status.render()
