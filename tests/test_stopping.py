"""Stopping a worker (issue 24, item 7): the first SIGTERM (or Ctrl-C) says what the worker
waits for, the second stops it at once, as in Scrapy, leaving its leases to expire, and
nothing is lost: the resumed crawl fetches every page and records it.

The worker is stopped while its record store cannot write (the SQLite file locked by another
process, as a full disk holds it): before, the second SIGTERM stopped the reactor but the
process kept waiting for the store's writer thread for minutes, then exited 0; and the
graceful stop had answered the leases of the pages whose records were not committed, so
the resumed crawl never fetched them again and their records were lost.
"""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from tests.crawls import ROOT, site_crawl_command
from tests.httpserver import TestServer
from tests.sitegen import LinkGraph

pytestmark = pytest.mark.slow

GRAPH = LinkGraph(pages=60)
LEASE_TTL = 3.0
#: Seconds the worker may take to end after the second SIGTERM (it waits at most 2 s for
#: the reactor; the rest is a loaded test machine's slack).
STOP_BUDGET = 8.0


def worker(site: TestServer, store: Path, redis_url: str) -> list[str]:
    return site_crawl_command(
        f"{site.url}/p/0", store,
        "-s", f"REDIS_URL={redis_url}", "-s", f"FRONTIER_LEASE_TTL={LEASE_TTL}",
        "-s", "CONCURRENT_REQUESTS=4", "-s", "FRONTIER_LEASE_BATCH=4", "-s", "LOG_LEVEL=INFO",
    )  # fmt: skip


def wait_for(condition: object, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "Ctrl-C"])
def test_a_second_signal_stops_at_once_and_nothing_is_lost(
    stop: signal.Signals, redis_url: str, tmp_path: Path
) -> None:
    store = tmp_path / "store.sqlite"
    log = tmp_path / "worker.log"
    with TestServer({"/*": GRAPH.page}, delay=0.3) as site:
        with log.open("w") as output:
            process = subprocess.Popen(
                worker(site, store, redis_url), cwd=ROOT, stdout=output, stderr=subprocess.STDOUT
            )
        try:
            wait_for(lambda: len(site.paths()) >= 8, timeout=120)
            # The store can no longer write: every page handled from now on waits, its
            # lease held, for its records to be committed.
            lock = sqlite3.connect(store, timeout=60, isolation_level=None)
            lock.execute("BEGIN EXCLUSIVE")
            time.sleep(1.5)
            process.send_signal(stop)
            wait_for(lambda: "Stopping: waiting for" in log.read_text(), timeout=10)
            process.send_signal(stop)
            sent = time.monotonic()
            code = process.wait(timeout=60)
            took = time.monotonic() - sent
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        text = log.read_text()
        lock.close()
        print(f"stopped {took:.1f} s after the second {stop.name}, exit {code}")
        assert took < STOP_BUDGET, text[-3000:]
        assert code == 128 + stop  # not 0: the crawl did not finish
        waiting = next(line for line in text.splitlines() if "Stopping: waiting for" in line)
        assert f"press Ctrl-C again (or send {stop.name} again) to stop now" in waiting
        assert f"Stopped at once ({stop.name} twice)" in text
        assert "Traceback" not in text, text[-3000:]
        fetched_before = set(site.paths())
        assert not GRAPH.expected_paths() <= fetched_before  # stopped mid-crawl

        # The same crawl, resumed: the stopped worker's leases expire and are fetched again.
        resumed = subprocess.run(
            worker(site, store, redis_url),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        fetched = {path.partition("?")[0] for path in site.paths()}
    assert GRAPH.expected_paths() <= fetched
    with sqlite3.connect(store) as connection:
        rows = connection.execute("SELECT fetch_url, final_url FROM pages").fetchall()
    recorded = {url.removeprefix(site.url).partition("?")[0] for row in rows for url in row}
    # Every page has its record: those whose records were waiting when the worker stopped
    # were fetched again (a redirect's source has one only if its target was new then).
    pages = {path for path in GRAPH.expected_paths() if not path.startswith("/moved/")}
    assert sorted(pages - recorded) == []
