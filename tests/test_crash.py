"""Crash safety of the shared frontier, end to end: real ``scrapy crawl`` workers against a
generated site of 350 URLs, killed with SIGKILL mid-crawl, and Redis itself killed mid-crawl.

What is asserted is what the site's server saw: every page fetched, and pages fetched twice
only within the bound the lease design allows (requests in flight in a killed worker, whose
leases expire and are fetched again by the other worker). The figures are printed
(``pytest -s``).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from tests.httpserver import TestServer
from tests.servers import RedisServer
from tests.sitegen import LinkGraph, serve

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
SCRAPY = str(ROOT / ".venv" / "bin" / "scrapy")
GRAPH = LinkGraph(pages=300)
#: Seconds the server takes per answer, so that a crawl lasts long enough to be interrupted.
DELAY = 0.1
CONCURRENCY = 4
LEASE_BATCH = 4
LEASE_TTL = 2.0
CRAWL_TIMEOUT = 120


class Worker:
    """One ``scrapy crawl site`` process sharing the frontier at ``redis_url``."""

    def __init__(
        self,
        name: str,
        site: TestServer,
        redis_url: str,
        tmp_path: Path,
        extra: Sequence[str] = (),
    ) -> None:
        self.name = name
        self.log = tmp_path / f"{name}.log"
        self.command = [
            SCRAPY, "crawl", "site",
            "-a", f"start_url={site.url}/p/0",
            *extra,
            "-s", f"REDIS_URL={redis_url}",
            "-s", f"FRONTIER_LEASE_TTL={LEASE_TTL}",
            "-s", f"FRONTIER_LEASE_BATCH={LEASE_BATCH}",
            "-s", f"CONCURRENT_REQUESTS={CONCURRENCY}",
            "-s", f"STORE_URL=sqlite:///{tmp_path / name}.sqlite",
            "-s", "LOG_LEVEL=INFO",
        ]  # fmt: skip
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        with self.log.open("a") as log:
            log.write(f"\n===== start {self.starts} =====\n")
            log.flush()
            self.process = subprocess.Popen(
                self.command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT
            )

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)

    def wait(self, deadline: float) -> int:
        assert self.process is not None
        try:
            return self.process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
            pytest.fail(f"{self.name} did not finish; log tail:\n{self.tail()}")

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


def fetches(site: TestServer) -> Counter[str]:
    """Requests the server answered, by page (a tracked spelling counts for its page)."""
    return Counter(path.partition("?")[0] for path in site.paths() if path != "/robots.txt")


def wait_for_progress(site: TestServer, share: float, deadline: float) -> int:
    """Wait until ``share`` of the site was fetched; the number fetched."""
    target = share * len(GRAPH.expected_paths())
    while time.monotonic() < deadline:
        done = len(fetches(site))
        if done >= target:
            return done
        time.sleep(0.05)
    pytest.fail(f"the crawl made no progress: {len(fetches(site))} pages fetched")


def assert_complete(site: TestServer, redis: RedisServer, workers: list[Worker]) -> Counter[str]:
    hits = fetches(site)
    missing = GRAPH.expected_paths() - set(hits)
    assert not missing, f"never fetched: {sorted(missing)[:20]}\n{workers[0].tail()}"
    with redis.client() as client:
        assert client.zcard("{site}:queue") == 0
        assert client.zcard("{site}:leases") == 0
        assert client.hgetall("{site}:failed") == {}
    return hits


@pytest.fixture
def redis_aof() -> Iterator[RedisServer]:
    with RedisServer(bloom=True, appendonly=True) as server:
        yield server


@pytest.fixture
def site() -> Iterator[TestServer]:
    with serve(GRAPH, delay=DELAY) as server:
        yield server


def test_workers_killed_mid_crawl_lose_no_page(
    site: TestServer, redis_aof: RedisServer, tmp_path: Path
) -> None:
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    workers = [Worker(name, site, redis_aof.url, tmp_path) for name in ("w1", "w2")]
    for worker in workers:
        worker.start()
    deadline = time.monotonic() + CRAWL_TIMEOUT
    victim = workers[0]
    kills_mid_crawl = 0
    wait_for_progress(site, 0.05, deadline)
    for _ in range(3):
        time.sleep(rng.uniform(0.5, 2.0))
        done = len(fetches(site))
        if not victim.running or done >= len(GRAPH.expected_paths()):
            break
        victim.kill()
        kills_mid_crawl += 1
        print(f"killed {victim.name} with {done} pages fetched")
        victim.start()
    for worker in workers:
        assert worker.wait(deadline) == 0, worker.tail()

    hits = assert_complete(site, redis_aof, workers)
    twice = sum(count - 1 for count in hits.values())
    print(
        f"seed {seed}: {len(hits)} pages, {sum(hits.values())} fetches, {kills_mid_crawl} "
        f"kills, {twice} fetched again"
    )
    assert kills_mid_crawl >= 2, "the crawl ended before the kills: slow the site down"
    # Only a killed worker's downloads in flight (at most CONCURRENT_REQUESTS) are repeated.
    assert twice <= kills_mid_crawl * CONCURRENCY


def test_redis_killed_and_restarted_mid_crawl_loses_nothing(
    site: TestServer, redis_aof: RedisServer, tmp_path: Path
) -> None:
    workers = [Worker(name, site, redis_aof.url, tmp_path) for name in ("w1", "w2")]
    for worker in workers:
        worker.start()
    deadline = time.monotonic() + CRAWL_TIMEOUT
    done = wait_for_progress(site, 0.3, deadline)
    redis_aof.kill()  # SIGKILL: only what reached the AOF (fsync always) survives
    time.sleep(1.0)
    redis_aof.start()
    print(f"Redis killed and restarted with {done} pages fetched")
    for worker in workers:
        assert worker.wait(deadline) == 0, worker.tail()

    hits = assert_complete(site, redis_aof, workers)
    twice = sum(count - 1 for count in hits.values())
    print(f"{len(hits)} pages, {sum(hits.values())} fetches, {twice} fetched again")
    # A lease may expire while Redis is away: each worker's leased requests (in flight or
    # buffered) may then be fetched by both.
    assert twice <= len(workers) * (CONCURRENCY + LEASE_BATCH)
    for worker in workers:
        assert "Traceback" not in worker.log.read_text(), worker.tail()
