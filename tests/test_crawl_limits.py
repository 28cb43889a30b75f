"""Scrapy's CLOSESPIDER_* limits on a shared frontier hold for the crawl as a whole: two
workers stop together when their combined count reaches the limit."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from tests.httpserver import TestServer, html

ROOT = Path(__file__).resolve().parent.parent
SCRAPY = [sys.executable, "-m", "scrapy.cmdline"]
#: Far more pages than any limit below; slow enough that the workers are still busy.
SITE = {f"/p/{i}": html(*(f"/p/{i * 3 + j}" for j in (1, 2, 3))) for i in range(300)}
SITE["/"] = html("/p/0")
CONCURRENCY = 2


def start_worker(server: TestServer, redis_url: str, tmp_path: Path, name: str, *options: str):
    log = (tmp_path / f"{name}.log").open("w")
    return subprocess.Popen(
        [*SCRAPY, "crawl", "site", "-a", f"start_url={server.url}/",
         "-s", f"REDIS_URL={redis_url}", "-s", f"CONCURRENT_REQUESTS={CONCURRENCY}",
         "-s", f"STORE_URL=sqlite:///{tmp_path / 'store.sqlite'}", *options],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip


def finish(worker: subprocess.Popen, tmp_path: Path, name: str) -> str:
    try:
        assert worker.wait(timeout=120) == 0
    finally:
        worker.kill()
    return (tmp_path / f"{name}.log").read_text()


@pytest.mark.parametrize(
    ("setting", "reason"),
    [("CLOSESPIDER_PAGECOUNT", "closespider_pagecount"),
     ("CLOSESPIDER_ITEMCOUNT", "closespider_itemcount")],
)  # fmt: skip
def test_two_workers_stop_at_the_crawls_total(
    redis_url: str, tmp_path: Path, setting: str, reason: str
) -> None:
    limit = 24
    with TestServer(SITE, delay=0.2) as server:
        workers = [
            start_worker(server, redis_url, tmp_path, name, "-s", f"{setting}={limit}")
            for name in ("a", "b")
        ]
        logs = [finish(worker, tmp_path, name) for worker, name in zip(workers, "ab", strict=True)]
        pages = [path for path in server.paths() if path != "/robots.txt"]
    for log in logs:
        assert f"finish reason:          {reason}" in log, log[-3000:]
        assert "Crawl-wide limit reached" in log
    fetched = [int(re.search(r"documents fetched:\s+(\d+)", log)[1]) for log in logs]
    assert all(fetched), fetched  # both worked...
    # ...and together stopped at the limit, give or take what was in flight (per process,
    # Scrapy's own count would have let each of them fetch the limit).
    assert limit - 2 <= len(pages) <= limit + 4 * CONCURRENCY, (len(pages), fetched)


def test_timeout_runs_from_the_crawls_first_start(redis_url: str, tmp_path: Path) -> None:
    timeout = 6.0
    client = redis.Redis.from_url(redis_url)
    with TestServer(SITE, delay=0.2) as server:
        first = start_worker(
            server, redis_url, tmp_path, "a", "-s", f"CLOSESPIDER_TIMEOUT={timeout}"
        )
        deadline = time.monotonic() + 60
        while not client.hexists("{site}:limits", "started") and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(3)
        second = start_worker(
            server, redis_url, tmp_path, "b", "-s", f"CLOSESPIDER_TIMEOUT={timeout}"
        )
        logs = [finish(first, tmp_path, "a"), finish(second, tmp_path, "b")]
    client.close()
    for log in logs:
        assert "finish reason:          closespider_timeout" in log, log[-3000:]
    elapsed = float(re.search(r"elapsed:\s+([\d.]+) s", logs[1])[1])
    # The second worker started 3 s into the crawl: it stops about 3 s later, not 6.
    assert elapsed < timeout - 1, logs[1][-2000:]
