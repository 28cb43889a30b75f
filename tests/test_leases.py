"""Leases are answered by what happens to their request, never by the garbage collector nor
by waiting for them to expire: a crawl whose callbacks all raise and whose middleware
ignores requests ends as soon as its pages are handled."""

from __future__ import annotations

import json
import subprocess
import time
from collections import Counter
from pathlib import Path

import redis

from tests.httpserver import TestServer, html

ROOT = Path(__file__).resolve().parent.parent
SCRAPY = str(ROOT / ".venv" / "bin" / "scrapy")
#: Far longer than the crawl may take: a lease left to expire would show.
LEASE_TTL = 60
#: The add-on installs its own middlewares beside the ones a project lists.
MIDDLEWARES = {"tests.spiders.failing.IgnoringMiddleware": 500}


def test_raising_callbacks_and_ignored_requests_answer_their_leases_at_once(
    redis_url: str, tmp_path: Path
) -> None:
    routes = {
        "/": html("/a", "/raise-first/b", "/ignored/c", "/dropped/d"),
        "/a": html("/raise-first/e", "/"),
        "/raise-first/b": html("/never-followed"),
        "/raise-first/e": html(),
        "/dropped/d": html(),
    }
    with TestServer(routes) as site:
        command = [
            SCRAPY, "crawl", "failing",
            "-s", "SPIDER_MODULES=tests.spiders",
            "-s", f"DOWNLOADER_MIDDLEWARES={json.dumps(MIDDLEWARES)}",
            "-a", f"start_url={site.url}/",
            "-s", f"REDIS_URL={redis_url}",
            "-s", f"FRONTIER_LEASE_TTL={LEASE_TTL}",
            "-s", "FRONTIER_HOST_CONCURRENCY=1",
            "-s", "CONCURRENT_REQUESTS_PER_DOMAIN=1",
            "-s", f"STORE_URL=sqlite:///{tmp_path / 'store.sqlite'}",
            "-s", "ROBOTSTXT_OBEY=False",
            "-s", "SSRF_GUARD_ENABLED=False",
        ]  # fmt: skip
        started = time.monotonic()
        result = subprocess.run(
            command, cwd=ROOT, capture_output=True, text=True, timeout=4 * LEASE_TTL
        )
        took = time.monotonic() - started
        hits = Counter(site.paths())
    assert result.returncode == 0, result.stderr[-3000:]
    assert took < LEASE_TTL / 2, result.stderr[-3000:]
    assert hits == {"/": 1, "/a": 1, "/raise-first/b": 1, "/raise-first/e": 1, "/dropped/d": 1}
    assert "'spider_exceptions/ValueError': 4" in result.stderr
    assert "frontier/reclaimed" not in result.stderr
    with redis.Redis.from_url(redis_url) as client:
        assert client.zcard("{failing}:queue") == client.zcard("{failing}:leases") == 0
        failed = {
            url.decode(): json.loads(record)["reason"]
            for url, record in client.hgetall("{failing}:failed").items()
        }
    assert failed == {
        f"{site.url}/ignored/c": "IgnoreRequest: ignored by the test's middleware",
        f"{site.url}/dropped/d": (
            "dropped after its download (no response, no replacement, no error)"
        ),
    }
