"""A shared-frontier worker killed mid-crawl keeps the records of the pages it finished.

Once a page's lease is released no worker fetches it again, so its redirect chains and
canonical hints must be in the store by then, not in a buffer that dies with the process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis

from bloom_frontier.pipelines.records import Chain
from bloom_frontier.pipelines.writer import StoreWriter
from tests.conftest import PG_DSN, PG_URL
from tests.httpserver import Page, TestServer, html, redirect

ROOT = Path(__file__).resolve().parent.parent
SCRAPY = [sys.executable, "-m", "scrapy.cmdline"]


def hang(_: str) -> Page:
    time.sleep(60)
    return html()


def test_killed_worker_keeps_records_of_released_pages(redis_url: str, tmp_path: Path) -> None:
    store_url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    routes = {
        "/": html("/a", "/r", "/hang"),
        "/a": html(head='<link rel="canonical" href="/a">'),
        "/r": redirect("/b"),
        "/b": html(),
        "/hang": hang,
    }
    client = redis.Redis.from_url(redis_url)
    with TestServer(routes) as server:
        worker = subprocess.Popen(
            [*SCRAPY, "crawl", "site", "-a", f"start_url={server.url}/",
             "-s", f"REDIS_URL={redis_url}", "-s", f"STORE_URL={store_url}",
             # Nothing would reach the store before the spider closes but for the page hook.
             "-s", "STORE_BATCH_SIZE=100000", "-s", "STORE_FLUSH_INTERVAL=3600"],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            # Everything done but /hang, whose lease the worker still holds.
            while not (
                client.zcard("{site}:queue") == 0
                and client.zcard("{site}:leases") == 1
                and "/b" in server.paths()
            ):
                assert time.monotonic() < deadline, "crawl did not get to /hang"
                time.sleep(0.2)
            time.sleep(0.5)
            os.kill(worker.pid, signal.SIGKILL)
        finally:
            worker.kill()
            worker.wait()
    hints, chains = recorded(store_url)
    assert hints[f"{server.url}/a"]["reason"] == "self"
    assert chains[f"{server.url}/r"].final_url == f"{server.url}/b"


def recorded(store_url: str) -> tuple[dict[str, dict[str, Any]], dict[str, Chain]]:
    """The canonical hints by page and the redirect chains by start URL in the store."""
    store = StoreWriter.from_url(store_url)
    try:
        hints = {hint["page_url"]: hint for hint in store.reader.hints()}
        return hints, {chain.start_url: chain for chain in store.reader.chains()}
    finally:
        store.close()


@contextmanager
def database_that_goes_away(
    _postgres_available: str | None,
) -> Iterator[tuple[str, Callable[[bool], None]]]:
    """A new PostgreSQL database's SQLAlchemy URL, and ``available(flag)``: False refuses
    every new connection and ends the open ones (a server going away), True lets them in
    again. Dropped afterwards."""
    if _postgres_available:
        pytest.fail(_postgres_available, pytrace=False)
    name = f"away_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_DSN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')

        def available(flag: bool) -> None:
            admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS {str(flag).lower()}')
            if not flag:
                admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                    (name,),
                )

        try:
            yield PG_URL.rsplit("/", 1)[0] + f"/{name}", available
        finally:
            available(False)
            admin.execute(f'DROP DATABASE "{name}"')


def test_a_worker_killed_while_the_store_is_away_loses_no_records(
    redis_url: str, _postgres_available: str | None
) -> None:
    # The database goes away as the page is fetched: its records cannot be committed, so its
    # lease stays held (not released with the records in memory only). A worker killed then,
    # and a second one run once the database is back, record the page.
    with database_that_goes_away(_postgres_available) as (store_url, available):
        StoreWriter.from_url(store_url).close()  # its schema, before it goes away

        fetched: list[str] = []

        def target(path: str) -> Page:
            if not fetched:
                available(False)
            fetched.append(path)
            return html(head='<link rel="canonical" href="/b">')

        client = redis.Redis.from_url(redis_url)
        command = [
            *SCRAPY, "crawl", "site", "-s", f"REDIS_URL={redis_url}",
            "-s", f"STORE_URL={store_url}", "-s", "STORE_FLUSH_INTERVAL=0.5",
            "-s", "FRONTIER_LEASE_TTL=3",
        ]  # fmt: skip
        with TestServer({"/r": redirect("/b"), "/b": target}) as server:
            command += ["-a", f"start_url={server.url}/r"]
            worker = subprocess.Popen(
                command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            try:
                deadline = time.monotonic() + 60
                while "/b" not in server.paths():
                    assert time.monotonic() < deadline, "crawl did not get to /b"
                    time.sleep(0.2)
                time.sleep(6.0)  # past a flush's retries, and the lease's TTL
                assert client.zcard("{site}:leases") == 1  # the page's, held: not committed
                os.kill(worker.pid, signal.SIGKILL)
            finally:
                worker.kill()
                worker.wait()
            available(True)
            # The killed worker's lease expires and the page is fetched again.
            subprocess.run(
                command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                timeout=120, check=True,
            )  # fmt: skip
        hints, chains = recorded(store_url)
    assert hints[f"{server.url}/b"]["reason"] == "self"
    assert chains[f"{server.url}/r"].final_url == f"{server.url}/b"
