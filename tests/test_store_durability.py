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
from pathlib import Path

import redis

from pipelines.store import SqlRecordStore
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
    store = SqlRecordStore.from_url(store_url)
    try:
        hints = {hint["page_url"]: hint for hint in store.hints()}
        chains = {chain.start_url: chain for chain in store.chains()}
    finally:
        store.close()
    assert hints[f"{server.url}/a"]["reason"] == "self"
    assert chains[f"{server.url}/r"].final_url == f"{server.url}/b"
