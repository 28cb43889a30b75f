"""`scrapy frontier SPIDER`: what a person watching a shared crawl sees."""

from __future__ import annotations

import doctest
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
from scrapy import Request

import bloom_frontier.frontier.status as status_module
from bloom_frontier.frontier.politeness import HostLimits
from bloom_frontier.frontier.redis.protocol import Holders, MalformedReply
from bloom_frontier.frontier.status import expected_error_rate, read_status
from bloom_frontier.seen.redis import bloom_info
from bloom_frontier.seen.sharded import ShardedBloomSeenFilter
from tests.httpserver import TestServer, html
from tests.test_frontier_redis import make_worker

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
    assert final["state"] == "finished" and final["pages"] >= 43  # its pages stay counted
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
    assert "in 4 shards" in status.render()


def test_leases_of_a_worker_gone_silent_show_and_the_crawl_is_not_finished(
    redis_url: str,
) -> None:
    """A worker killed while holding leases: its leases still count under its name (so the
    rows add up to the total) and the crawl reads as stopped with work left, not finished."""
    client = redis.Redis.from_url(redis_url)
    worker = make_worker(redis_url)
    try:
        worker.admit(None, [Request(f"https://example.com/{i}") for i in range(3)])
        assert len(worker.lease(2)) == 2
        client.hset("{example}:progress", mapping={"started": 1_000, "updated": 61_000})
        status = read_status(client, "{example}", 0.001, HostLimits())
        assert (status.queued, status.leased, status.state) == (1, 2, "stopped")
        assert status.workers == [{"worker": worker.owner, "alive": False, "leased": 2}]
        screen = status.render()
        assert "crawl example: stopped" in screen
        assert "no worker alive, work left: 1 queued, 2 leased" in screen
        assert f"{worker.owner}       2  (not reporting)" in screen
        assert "in 0:01:00" in screen  # from the first report to the last, not to now
        assert "crawl finished" not in screen
    finally:
        worker.close()


def test_holders_reply_must_add_up_to_the_leases() -> None:
    reply = Holders.from_reply([b"4", b"3", b"0", b"w1", b"2", b"", b"1"])
    assert reply.sizes.leased == 3 and reply.leases == {"w1": 2, "": 1}
    for bad in ([b"4", b"3", b"0", b"w1", b"2"], [b"4", b"3", b"0", b"w1"], [b"1", b"2"]):
        with pytest.raises(MalformedReply, match="malformed holders reply"):
            Holders.from_reply(bad)


def test_units_read_as_a_person_reads_them() -> None:
    """Bytes in KiB/MiB, percentages without exponents, H:MM:SS, the crawl's name without
    hash-tag braces (the examples in the status module, run)."""
    results = doctest.testmod(status_module)
    assert results.attempted >= 4 and results.failed == 0
