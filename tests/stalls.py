"""A shared crawl whose Redis or record store is made to hang for a while, with the worker's
loop stalls measured (:class:`bloom_frontier.loopwatch.LoopStallMeter`): used by
``tests/test_loop_stalls.py`` and ``bench/loop_stall.py``."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from tests.servers import RedisServer
from tests.sitegen import LinkGraph, serve

ROOT = Path(__file__).resolve().parent.parent
SCRAPY = str(ROOT / ".venv" / "bin" / "scrapy")
#: The add-on installs the project's own extensions next to these.
EXTENSIONS = {"bloom_frontier.loopwatch.LoopStallMeter": 0}


#: Scrapy's log format with milliseconds, so a response's time is known to better than the
#: second its default stamp gives.
MILLISECOND_LOG_FORMAT = "%(asctime)s.%(msecs)03d [%(name)s] %(levelname)s: %(message)s"


@dataclass
class StalledCrawl:
    """What one crawl did: its exit code and log, the pages the site served, its longest
    loop stall, how long the hang lasted and how many pages the site served meanwhile."""

    returncode: int
    log: str
    paths: list[str]
    expected: set[str]
    longest_stall_ms: int
    hang_seconds: float
    served_during_hang: int
    #: Wall-clock time the hang began.
    hang_started_at: float

    def responses_during_hang(self, margin: float = 0.2) -> int:
        """Responses the worker logged as crawled (DEBUG) more than ``margin`` seconds after
        the hang began and before it ended (the crawl logs milliseconds: see
        ``MILLISECOND_LOG_FORMAT``)."""
        first = self.hang_started_at + margin
        last = self.hang_started_at + self.hang_seconds
        count = 0
        for stamp, millis in re.findall(
            r"^(\S+ \S+)\.(\d{3}) \[scrapy\.core\.engine\] DEBUG: Crawled", self.log, re.M
        ):
            when = time.mktime(time.strptime(stamp, "%Y-%m-%d %H:%M:%S")) + int(millis) / 1000
            count += first <= when <= last
        return count

    @property
    def every_page_fetched(self) -> bool:
        return self.expected <= set(self.paths)


@contextmanager
def redis_paused(server: RedisServer) -> Iterator[None]:
    """SIGSTOP the redis-server process, SIGCONT on exit."""
    assert server._process is not None
    os.kill(server._process.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(server._process.pid, signal.SIGCONT)


@contextmanager
def store_locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on the SQLite store from another process."""
    holder = subprocess.Popen(
        [
            str(ROOT / ".venv" / "bin" / "python"), "-c",
            "import sqlite3, sys\n"
            f"c = sqlite3.connect({str(path)!r}, isolation_level=None)\n"
            "c.execute('BEGIN EXCLUSIVE')\n"
            "print('locked', flush=True)\n"
            "sys.stdin.readline()\n"
            "c.execute('ROLLBACK')\n",
        ],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        yield
    finally:
        assert holder.stdin is not None
        holder.stdin.write("\n")
        holder.stdin.close()
        holder.wait(timeout=10)


def crawl_command(site_url: str, store: Path, *extra: str, lease_ttl: float = 30.0) -> list[str]:
    """``scrapy crawl site`` of the site at ``site_url`` into the SQLite ``store``, with the
    loop stall meter installed and leases of ``lease_ttl`` s; ``extra`` arguments last."""
    return [
        SCRAPY, "crawl", "site",
        "-a", f"start_url={site_url}/p/0",
        "-s", f"STORE_URL=sqlite:///{store}",
        "-s", f"EXTENSIONS={json.dumps(EXTENSIONS)}",
        "-s", "CONCURRENT_REQUESTS=4",
        "-s", f"FRONTIER_LEASE_TTL={lease_ttl}",
        *extra,
    ]  # fmt: skip


def longest_stall_ms(log: str) -> int:
    """The crawl's longest loop stall, closing included, from its log (-1: not logged)."""
    match = re.search(r"Twisted's loop: longest stall (\d+) ms", log)
    return int(match.group(1)) if match else -1


@dataclass
class ClosedCrawl:
    """A crawl whose store was locked while its spider closed: exit code and log, the pages
    the site served and those the store holds (final URLs' paths), the longest loop stall
    (closing included), and whether the spider had begun closing before the lock was
    released."""

    returncode: int
    log: str
    paths: set[str]
    stored_paths: set[str]
    expected: set[str]
    longest_stall_ms: int
    closed_while_locked: bool


def crawl_closing_on_a_locked_store(
    tmp_path: Path, *, pages: int = 30, after_hits: int = 5, held_after_closing: float = 4.0
) -> ClosedCrawl:
    """Crawl a generated site on the embedded frontier, every record buffered until the
    spider closes; once the site served ``after_hits`` requests, lock the store from another
    process until ``held_after_closing`` seconds after the spider began closing."""
    graph = LinkGraph(pages=pages)
    store = tmp_path / "store.sqlite"
    sqlite3.connect(store).close()
    log_path = tmp_path / "crawl.log"
    with serve(graph, delay=0.1) as site, log_path.open("w") as log:
        command = crawl_command(
            site.url, store,
            "-s", "STORE_FLUSH_INTERVAL=3600",
            "-s", "STORE_BATCH_SIZE=1000000",
        )  # fmt: skip
        process = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while len(site.paths()) < after_hits and time.monotonic() < deadline:
            time.sleep(0.02)
        with store_locked(store):
            while "Closing spider" not in log_path.read_text() and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(held_after_closing)
            closed_while_locked = "Closing spider" in log_path.read_text()
        process.wait(timeout=120)
        paths = {path.partition("?")[0] for path in site.paths()}
    with closing(sqlite3.connect(store)) as connection:
        fetched = {url for (url,) in connection.execute("SELECT final_url FROM pages")}
    text = log_path.read_text()
    return ClosedCrawl(
        returncode=process.returncode,
        log=text,
        paths=paths,
        stored_paths={urlsplit(url).path for url in fetched},
        expected=graph.expected_paths(),
        longest_stall_ms=longest_stall_ms(text),
        closed_while_locked=closed_while_locked,
    )


def crawl_with_hang(
    tmp_path: Path,
    hang: Callable[[RedisServer, Path], Callable[[], object]] | None,
    *,
    pages: int = 80,
    hang_seconds: float = 5.0,
    after_hits: int = 15,
    page_delay: float = 0.05,
    lease_ttl: float = 30.0,
    settings: dict[str, str] | None = None,
) -> StalledCrawl:
    """Crawl a generated site of ``pages`` pages (each served in ``page_delay`` s) through a
    shared frontier with leases of ``lease_ttl`` s (and more Scrapy ``settings``); once the
    site served ``after_hits`` requests, hold ``hang(redis, store)``'s context for
    ``hang_seconds``."""
    graph = LinkGraph(pages=pages)
    store = tmp_path / "store.sqlite"
    sqlite3.connect(store).close()
    with RedisServer(bloom=True) as redis_server, serve(graph, delay=page_delay) as site:
        extra = ["-s", f"REDIS_URL={redis_server.url}", "-s", "LOG_LEVEL=DEBUG"]
        extra += ["-s", f"LOG_FORMAT={MILLISECOND_LOG_FORMAT}"]
        for name, value in (settings or {}).items():
            extra += ["-s", f"{name}={value}"]
        command = crawl_command(site.url, store, *extra, lease_ttl=lease_ttl)
        log_path = tmp_path / "crawl.log"
        with log_path.open("w") as log:
            process = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
            served_during_hang, took, hang_started_at = 0, 0.0, 0.0
            if hang is not None:
                deadline = time.monotonic() + 60
                while len(site.paths()) < after_hits and time.monotonic() < deadline:
                    time.sleep(0.02)
                context = hang(redis_server, store)
                started, hang_started_at = time.monotonic(), time.time()
                with context:  # type: ignore[attr-defined]
                    before = len(site.paths())
                    threading.Event().wait(hang_seconds)
                    served_during_hang = len(site.paths()) - before
                took = time.monotonic() - started
            process.wait(timeout=180)
        paths = [path.partition("?")[0] for path in site.paths()]
    text = log_path.read_text()
    return StalledCrawl(
        returncode=process.returncode,
        log=text,
        paths=paths,
        expected=graph.expected_paths(),
        longest_stall_ms=longest_stall_ms(text),
        hang_seconds=took,
        served_during_hang=served_during_hang,
        hang_started_at=hang_started_at,
    )


def pause_redis(redis_server: RedisServer, _store: Path) -> object:
    return redis_paused(redis_server)


def lock_store(_redis: RedisServer, store: Path) -> object:
    return store_locked(store)
