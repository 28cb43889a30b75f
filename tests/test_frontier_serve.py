"""`scrapy frontier SPIDER --serve PORT` as an operator sees it: the page loaded in headless
Chromium while two workers crawl a shared site, its figures (read from the DOM after its
refresh) against what `scrapy frontier --json` prints at that moment, a screenshot; then the
JSON endpoint's history, a foreign host refused, Ctrl-C, a port in use and Redis going away.
"""

from __future__ import annotations

import doctest
import json
import re
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from bloom_frontier.frontier import liveview
from bloom_frontier.frontier.redis.layout import FrontierKeys
from bloom_frontier.frontier.redis.lua import FrontierScripts
from tests.crawls import ROOT, SCRAPY, site_crawl_command
from tests.httpserver import Page, TestServer, html
from tests.servers import RedisServer
from tests.test_redirect_maps import BROWSER_SERVICES, chromium

#: How often the view reads the crawl, and the workers report, in these tests (seconds).
INTERVAL = "0.5"
#: Pages of the site behind the gate (each links to the next two).
GATED_PAGES = 24
#: A figure the page shows: ``<b data-figure="pages">1,234</b>``.
FIGURE = re.compile(r'data-figure="(\w+)">([^<]*)<')
WORKER_ROW = re.compile(r'<tr data-worker="([^"]+)">(.*?)</tr>')
FIELD = re.compile(r'data-field="(\w+)">([^<]*)<')


class Served:
    """A running ``scrapy frontier site --serve 0``: its process and URL."""

    def __init__(self, redis_url: str, *args: str) -> None:
        self.process = subprocess.Popen(
            [SCRAPY, "frontier", "site", "--serve", "0", *args, "-s", f"REDIS_URL={redis_url}",
             "-s", f"FRONTIER_STATUS_INTERVAL={INTERVAL}"],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        found = re.fullmatch(
            r"serving crawl site at (http://127\.0\.0\.1:\d+/) \(Ctrl-C stops\)\n", line
        )
        assert found, (line, self.process.stderr.read() if self.process.poll() is not None else "")
        self.url = found[1]

    def json(self, query: str = "", host: str | None = None) -> dict[str, Any]:
        request = urllib.request.Request(self.url + "status.json" + query)
        if host:
            request.add_header("Host", host)
        with urllib.request.urlopen(request, timeout=30) as answer:
            return json.load(answer)

    def stop(self) -> subprocess.CompletedProcess[str]:
        """Ctrl-C, as a terminal sends it: what the command printed after its first line."""
        self.process.send_signal(signal.SIGINT)
        out, err = self.process.communicate(timeout=30)
        return subprocess.CompletedProcess(self.process.args, self.process.returncode, out, err)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.communicate(timeout=30)


@pytest.fixture
def served(redis_url: str) -> Iterator[Served]:
    view = Served(redis_url)
    try:
        yield view
    finally:
        view.close()


def frontier_json(redis_url: str) -> dict[str, Any]:
    """One reading of ``scrapy frontier site --json``."""
    done = subprocess.run(
        [SCRAPY, "frontier", "site", "--json", "-s", f"REDIS_URL={redis_url}"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return json.loads(done.stdout)


def number(text: str) -> int:
    return int(text.replace(",", ""))


def page_figures(url: str, tmp: Path) -> tuple[dict[str, str], dict[str, dict[str, str]], str]:
    """The page at ``url`` after its refreshes: its figures, its worker rows (their fields)
    and the DOM (which says, on ``<body>``, the clock of the reading shown)."""
    result = chromium("--virtual-time-budget=3000", "--dump-dom", url, tmp=tmp)
    assert result.returncode == 0, result.stderr[-2000:]
    dom = result.stdout
    assert re.search(r'<body data-clock="[\d.]+" data-state="\w+" data-refreshes="[1-9]', dom), dom
    rows = {name: dict(FIELD.findall(row)) for name, row in WORKER_ROW.findall(dom)}
    return dict(FIGURE.findall(dom)), rows, dom


def shown_clock(dom: str) -> float:
    found = re.search(r'<body data-clock="([\d.]+)"', dom)
    assert found, dom
    return float(found[1])


def agree(figures: dict[str, str], rows: dict[str, dict[str, str]], reading: dict) -> None:
    """The page shows ``reading`` (a ``--json`` object): pages, queued, leased, workers
    alive, and each worker's leases and pages."""
    alive = [worker for worker in reading["workers"] if worker["alive"]]
    assert {key: number(figures[key]) for key in ("pages", "queued", "leased", "workers")} == {
        "pages": reading["pages"],
        "queued": reading["queued"],
        "leased": reading["leased"],
        "workers": len(alive),
    }
    assert {name: number(row["leased"]) for name, row in rows.items()} == {
        worker["worker"]: worker["leased"] for worker in reading["workers"]
    }
    assert {name: number(row["pages"]) for name, row in rows.items() if "pages" in row} == {
        worker["worker"]: worker["pages_total"] for worker in alive
    }


def gated_site(gate: threading.Event) -> dict[str, Any]:
    """``/`` links to the first pages; ``/p/N`` answers once ``gate`` is set."""

    def gated(path: str) -> Page | None:
        found = re.fullmatch(r"/p/(\d+)", path)
        if not found:
            return None
        gate.wait(120)
        n = int(found[1])
        return html(*(f"/p/{k}" for k in (n + 1, n + 2) if k < GATED_PAGES))

    return {"/": html(*(f"/p/{k}" for k in range(6))), "/*": gated}


def start_worker(start_url: str, store: Path, redis_url: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        site_crawl_command(
            start_url, store, "-s", f"REDIS_URL={redis_url}",
            "-s", f"FRONTIER_STATUS_INTERVAL={INTERVAL}", "-s", "CONCURRENT_REQUESTS=2",
        ),
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def settled(redis_url: str, timeout: float) -> dict[str, Any]:
    """A ``--json`` reading of two alive workers, each holding leases, equal (pages, queue,
    leases, workers) to the reading after it, one status interval apart."""
    deadline = time.monotonic() + timeout
    last: tuple | None = None
    while True:
        reading = frontier_json(redis_url)
        alive = [worker for worker in reading["workers"] if worker["alive"]]
        key = (
            reading["pages"], reading["queued"], reading["leased"],
            tuple((w["worker"], w["leased"], w.get("pages_total")) for w in reading["workers"]),
        )  # fmt: skip
        if len(alive) == 2 and all(worker["leased"] for worker in alive) and key == last:
            return reading
        assert time.monotonic() < deadline, f"the crawl did not settle in {timeout} s: {reading}"
        last = key
        time.sleep(float(INTERVAL) * 2)


def test_served_page_shows_what_json_prints(redis_url: str, served: Served, tmp_path: Path) -> None:
    gate = threading.Event()
    with TestServer(gated_site(gate)) as site:
        workers = [
            start_worker(f"{site.url}/", tmp_path / f"w{n}.sqlite", redis_url) for n in range(2)
        ]
        try:
            # Both workers stuck on the gated pages: the crawl holds still, running.
            held = settled(redis_url, 90)
            figures, rows, dom = page_figures(served.url, tmp_path)
            assert frontier_json(redis_url)["leased"] == held["leased"]  # still holding
            agree(figures, rows, held)
            assert 'data-state="running"' in dom and len(rows) == 2
            assert held["pages"] >= 1 and held["leased"] >= 2
            # Its top host: the site, with what it has queued and in flight.
            hosts = served.json()["live"]["hosts"]
            assert hosts["top"][0]["host"] == "127.0.0.1"
            assert hosts["top"][0]["queued"] == held["queued"] and hosts["hosts"] == 1
            shot = chromium(
                "--virtual-time-budget=3000", f"--screenshot={tmp_path / 'view.png'}",
                "--window-size=1280,1000", served.url, tmp=tmp_path,
            )  # fmt: skip
            assert shot.returncode == 0 and (tmp_path / "view.png").stat().st_size > 20_000

            gate.set()
            # Moving: the page shows the view's reading of a moment within one refresh of
            # the --json readings around it, figure for figure.
            before = frontier_json(redis_url)
            figures, rows, dom = page_figures(served.url, tmp_path)
            after = frontier_json(redis_url)
            clock = shown_clock(dom)
            assert before["clock"] - float(INTERVAL) <= clock <= after["clock"]
            [point] = [p for p in served.json()["live"]["history"] if p["t"] == clock]
            shown = {key: number(figures[key]) for key in ("pages", "queued", "leased")}
            assert shown == {key: point[key] for key in ("pages", "queued", "leased")}
            assert number(figures["workers"]) == point["workers_alive"]
            assert shown["pages"] <= after["pages"]

            deadline = time.monotonic() + 180
            while any(worker.poll() is None for worker in workers):
                assert time.monotonic() < deadline, "the crawl did not end in 180 s"
                time.sleep(0.2)
            assert [worker.returncode for worker in workers] == [0, 0]
        finally:
            gate.set()
            for worker in workers:
                worker.kill()
    final = frontier_json(redis_url)
    assert final["state"] == "finished" and final["pages"] >= GATED_PAGES
    time.sleep(float(INTERVAL) * 2)  # the view's next reading
    figures, rows, dom = page_figures(served.url, tmp_path)
    agree(figures, rows, final)
    assert 'data-state="finished"' in dom and rows == {}
    # Nothing fetched but the view's own page and JSON.
    requested = set(re.findall(r'"url":"([^"]+)"', (tmp_path / "net.json").read_text()))
    own = {url for url in requested if not BROWSER_SERVICES.match(url)}
    assert own and all(url.startswith(served.url) for url in own), own

    # The JSON: the --json reading, plus the history kept by the serving process.
    answer = served.json()
    live = answer.pop("live")
    assert answer.keys() == final.keys()
    assert {k: answer[k] for k in ("pages", "queued", "leased", "failed", "state")} == {
        k: final[k] for k in ("pages", "queued", "leased", "failed", "state")
    }
    history = live["history"]
    times = [point["t"] for point in history]
    assert times == sorted(times) and len(history) >= 20
    assert [p["pages"] for p in history] == sorted(p["pages"] for p in history)
    assert max(p["pages_per_min"] for p in history) > 0
    assert max(p["leased"] for p in history) >= held["leased"]
    assert history[-1]["pages"] == final["pages"] and history[-1]["state"] == "finished"
    newer = served.json(f"?since={times[-3]}")["live"]["history"]
    assert [point["t"] for point in newer][:2] == times[-2:]
    # A page elsewhere naming this server (DNS rebinding) reads nothing.
    with pytest.raises(urllib.error.HTTPError) as refused:
        served.json(host="attacker.example:80")
    assert refused.value.code == 421

    stopped = served.stop()
    assert stopped.returncode == 0, stopped.stderr
    assert stopped.stdout.strip() == "stopped serving crawl site" and stopped.stderr == ""
    port = int(served.url.rsplit(":", 1)[1].strip("/"))
    with socket.socket() as again:
        again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds
        again.bind(("127.0.0.1", port))  # released: a new --serve may listen there


def test_a_port_in_use_is_one_error_line(redis_url: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [SCRAPY, "frontier", "site", "--serve", str(port), "-s", f"REDIS_URL={redis_url}"],
            cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (
        f"error: cannot serve on 127.0.0.1:{port}: the port is in use (another --serve?); "
        "choose another PORT, or 0 for any free one\n"
    )


def test_redis_going_away_keeps_the_view_up_and_says_so() -> None:
    server = RedisServer(bloom=True)
    server.start()
    try:
        view = Served(server.url)
        try:
            assert view.json()["live"]["error"] is None
            server.close()
            deadline = time.monotonic() + 30
            while (answer := view.json())["live"]["error"] is None:
                assert time.monotonic() < deadline, "the view never said Redis was away"
                time.sleep(0.2)
            assert answer["live"]["error"].startswith("cannot read the crawl from Redis: ")
            assert answer["state"] == "waiting"  # the last reading, still shown
            stopped = view.stop()
            assert stopped.returncode == 0 and "Traceback" not in stopped.stderr
        finally:
            view.close()
    finally:
        server.close()


def test_top_hosts_by_queue_with_their_pauses(redis_url: str) -> None:
    """Seeded requests of three hosts: the most queued first, a paused host's pause left; a
    scan cut short says it is partial."""
    urls = [f"https://{host}.example/{n}" for host, count in (("a", 3), ("b", 5), ("c", 1))
            for n in range(count)]  # fmt: skip
    subprocess.run(
        [SCRAPY, "seed", "site", *urls, "-s", f"REDIS_URL={redis_url}"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    client = redis.Redis.from_url(redis_url)
    keys = FrontierKeys.for_prefix("{site}")
    FrontierScripts(client, keys, ("pause",)).run("pause", ["b.example", 30_000])
    seconds, micros = client.time()
    found = liveview.read_hosts(client, "{site}", seconds + micros / 1e6)
    assert [(row.host, row.queued, row.in_flight) for row in found.top] == [
        ("b.example", 5, 0), ("a.example", 3, 0), ("c.example", 1, 0),
    ]  # fmt: skip
    assert 29 <= found.top[0].paused_for <= 30 and found.top[1].paused_for == 0
    assert (found.hosts, found.lanes, found.partial) == (3, 3, False)
    cut = liveview.read_hosts(client, "{site}", seconds, top=1, scan=2)
    assert len(cut.top) == 1 and cut.partial and (cut.lanes, cut.lanes_scanned) == (3, 2)


def test_loopback_names_as_the_view_reads_them() -> None:
    """Which ``Host`` headers a loopback-bound view answers (the module's examples, run)."""
    results = doctest.testmod(liveview)
    assert results.attempted >= 2 and results.failed == 0
