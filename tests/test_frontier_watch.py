"""`scrapy frontier SPIDER --watch` as a person sees it: the screen of a detached tmux session
(fixed size) read with ``tmux capture-pane`` while two workers crawl a small shared site,
then ``--failed`` for the request that could not be fetched."""

from __future__ import annotations

import json
import re
import shlex
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.crawls import ROOT, SCRAPY, site_crawl_command
from tests.httpserver import TestServer, html
from tests.services import debian_tool

#: The watch's screen, in characters (wide enough that no line wraps).
COLUMNS, ROWS = 160, 40
WORKER_ROW = re.compile(
    r"^ {4}(?P<worker>\S+:\d+:[0-9a-f]{8})\s+(?P<leased>[\d,]+)\s+(?P<pages>[\d,]+)\s+"
    r"(?P<rate>\d+\.\d)\s+(?P<received>[\d.]+ (?:B|KiB|MiB))\s+(?P<taken>[\d,]+)$"
)


def closed_port() -> int:
    """A loopback port nothing listens on (a connection to it is refused)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Screen:
    """A detached tmux session of :data:`COLUMNS` x :data:`ROWS` running one command, on a
    tmux server of its own (killed at the end, nobody else's)."""

    def __init__(self, tmux: Path, socket_name: str) -> None:
        self.base = [str(tmux), "-L", socket_name, "-f", "/dev/null"]

    def start(self, command: str) -> None:
        subprocess.run(
            [*self.base, "new-session", "-d", "-s", "watch", "-x", str(COLUMNS),
             "-y", str(ROWS), command],
            check=True, timeout=30,
        )  # fmt: skip

    def text(self) -> str:
        return subprocess.run(
            [*self.base, "capture-pane", "-p", "-t", "watch"],
            check=True, capture_output=True, text=True, timeout=30,
        ).stdout  # fmt: skip

    def wait_for(self, ready: Callable[[str], bool], timeout: float, what: str) -> str:
        """The first screen ``ready`` accepts (polled every 0.2 s)."""
        deadline = time.monotonic() + timeout
        while True:
            screen = self.text()
            if ready(screen):
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(f"no screen with {what} in {timeout} s; last:\n{screen}")
            time.sleep(0.2)

    def close(self) -> None:
        subprocess.run([*self.base, "kill-server"], check=False, timeout=30)


@pytest.fixture
def screen(tmp_path: Path) -> Iterator[Screen]:
    shown = Screen(debian_tool("tmux"), f"watch-{tmp_path.name}")
    try:
        yield shown
    finally:
        shown.close()


def worker_rows(screen: str) -> list[re.Match[str]]:
    return [match for line in screen.splitlines() if (match := WORKER_ROW.match(line))]


def number(text: str) -> int:
    return int(text.replace(",", ""))


def start_worker(start_url: str, store: Path, redis_url: str) -> subprocess.Popen[bytes]:
    """A worker of the shared crawl, reporting every half second."""
    return subprocess.Popen(
        site_crawl_command(
            start_url, store, "-s", f"REDIS_URL={redis_url}",
            "-s", "FRONTIER_STATUS_INTERVAL=0.5", "-s", "CONCURRENT_REQUESTS=3",
        ),
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def frontier(redis_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SCRAPY, "frontier", "site", *args, "-s", f"REDIS_URL={redis_url}"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip


def test_watch_screen_reads_right_then_says_finished(
    redis_url: str, screen: Screen, tmp_path: Path
) -> None:
    refused = f"http://127.0.0.1:{closed_port()}/gone"
    pages = {f"/p/{i}": html(f"/p/{i + 1}", f"/p/{i + 2}", f"/q/{i}") for i in range(30)}
    pages |= {f"/q/{i}": html("/p/0") for i in range(30)}
    pages["/"] = html("/p/0", refused)
    watch = [SCRAPY, "frontier", "site", "--watch", "0.3", "-s", f"REDIS_URL={redis_url}"]
    screen.start(
        f"cd {shlex.quote(str(ROOT))} && TZ=UTC {shlex.join(watch)}; echo watch-exit=$?; sleep 600"
    )
    screen.wait_for(lambda s: "crawl site: waiting" in s, 60, "the crawl not started yet")
    frames = []
    began = time.monotonic()
    with TestServer(pages, delay=0.4) as server:
        workers = [
            start_worker(f"{server.url}/", tmp_path / f"w{n}.sqlite", redis_url) for n in range(2)
        ]
        try:
            deadline = time.monotonic() + 180
            while any(worker.poll() is None for worker in workers):
                assert time.monotonic() < deadline, "the crawl did not end in 180 s"
                frames.append(screen.text())
                time.sleep(0.2)
            assert [worker.returncode for worker in workers] == [0, 0]
        finally:
            for worker in workers:
                worker.kill()
        fetched = len(server.hits)
        ran = time.monotonic() - began
    # Every screen of the running crawl: each worker from its start, their leases now adding
    # up to the total, one header with the clock, no hash-tag braces, no raw exponents.
    running = [frame for frame in frames if "crawl site: running" in frame]
    assert running, frames[-1]
    for frame in running:
        rows = worker_rows(frame)
        total = re.search(r"^  leased:   ([\d,]+)$", frame, re.M)
        assert rows and total, frame
        assert sum(number(row["leased"]) for row in rows) == number(total[1]), frame
        assert re.match(r"crawl site: running   \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC\n", frame)
        assert "{" not in frame and "e+" not in frame and "e-" not in frame, frame
        assert re.search(r"in 1 shard, expected error now (< )?[\d.]+%$", frame, re.M), frame
    assert any(len(worker_rows(frame)) == 2 for frame in running)
    assert any(number(row["leased"]) > 0 for frame in running for row in worker_rows(frame))
    # Mid-crawl: pages and bytes in human units, the rate now and overall, the elapsed time.
    busy = re.compile(
        r"^  [1-9][\d,]* pages \([\d.]+ KiB\), [\d,]+ items, \d+ failed; "
        r"(\d+\.\d)/s now, (\d+\.\d)/s overall; elapsed 0:0\d:\d\d$",
        re.M,
    )
    rates = [match.groups() for frame in running if (match := busy.search(frame))]
    assert any(float(now) > 0 and float(overall) > 0 for now, overall in rates), running[-1]
    assert any(
        number(row["pages"]) > 0 and row["received"].endswith("KiB") and float(row["rate"]) > 0
        for frame in running
        for row in worker_rows(frame)
    )

    final = screen.wait_for(lambda s: "watch-exit=" in s, 60, "the watch ending")
    assert "watch-exit=0" in final
    assert "crawl site: finished" in final
    assert "crawl site finished: --watch stops" in final
    done = re.search(
        r"crawl finished: ([\d,]+) pages \(([\d.]+ (?:KiB|MiB))\), [\d,]+ items, 1 failed in "
        r"0:(\d\d):(\d\d) \((\d+\.\d)/s\)",
        final,
    )
    assert done, final
    # The elapsed time stopped with the crawl: from the first worker's start to the last's end.
    elapsed = int(done[3]) * 60 + int(done[4])
    assert 1 <= elapsed <= ran
    # pages / elapsed, the elapsed time shown in whole seconds (cut, not rounded)
    assert number(done[1]) / (elapsed + 1) - 0.05 <= float(done[5]) <= number(done[1]) / elapsed
    # Every worker's responses, the exited ones' too: what the site served, and robots.txt
    # answered from Redis to the worker that did not fetch it (a response to Scrapy).
    assert fetched <= int(done[1].replace(",", "")) <= fetched + 1
    assert "workers:  0 alive" in final and "  queued:   0\n" in final
    assert "  failed:   1 (list them: --failed)" in final

    listed = frontier(redis_url, "--failed").stdout.splitlines()
    assert listed[0] == "1 failed request(s) in crawl site, oldest first:"
    assert re.fullmatch(rf"\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\dZ  {refused}  \(3 attempts\)", listed[1])
    assert "Connection" in listed[2] and "refused" in listed[2].lower()
    [record] = [
        json.loads(line) for line in frontier(redis_url, "--failed", "--json").stdout.splitlines()
    ]
    assert record["url"] == refused and record["attempts"] == 3
    assert abs(record["failed_at"] - time.time()) < 300 and record["worker"]


def test_failed_says_so_when_there_are_none(redis_url: str) -> None:
    done = frontier(redis_url, "--failed")
    assert done.stdout == "no failed requests in crawl site\n"
    assert frontier(redis_url, "--failed", "--json").stdout == ""
