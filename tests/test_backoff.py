"""Crawl-wide backoff: a host that answers 429 or 503 gets no request before the time it asked,
from any worker (bloom_frontier.middlewares.politeness.HostBackoffMiddleware,
bloom_frontier.frontier.politeness)."""

from __future__ import annotations

import itertools
import subprocess
import threading
import time
from email.utils import formatdate
from pathlib import Path
from typing import Any

import pytest
from scrapy.utils.test import get_crawler

from bloom_frontier.frontier.politeness import backoff_pause, retry_after
from bloom_frontier.middlewares.politeness import HostBackoffMiddleware
from tests.crawls import site_crawl_command
from tests.httpserver import Page, TestServer
from tests.servers import RedisServer
from tests.sitegen import LinkGraph
from tests.test_politeness import pages, urls, workers  # noqa: F401 (a fixture)

ROOT = Path(__file__).resolve().parent.parent
GRAPH = LinkGraph(pages=40)
#: How long after a 429 was answered a request may still reach the server: it left its
#: worker before the worker could read the 429 (both workers keep up to 16 requests in
#: flight; a loaded machine is slow to read an answer).
IN_FLIGHT = 1.0


def test_retry_after_is_read_as_seconds_or_an_http_date() -> None:
    now = 1_800_000_000.0
    assert retry_after(b"5", now) == 5.0
    assert retry_after(" 120 ", now) == 120.0
    assert retry_after(formatdate(now + 30, usegmt=True).encode(), now) == 30.0
    assert retry_after(formatdate(now - 30, usegmt=True).encode(), now) == 0.0  # past: none
    for unreadable in (None, b"", b"-5", b"1.5", b"soon", b"Mon, 99 Foo 2030"):
        assert retry_after(unreadable, now) is None, unreadable


def test_backoff_pauses_for_retry_after_or_repeated_answers_without_one_up_to_the_cap() -> None:
    assert backoff_pause(5.0, strikes=0, cap=300) == 5.0
    assert backoff_pause(86_400.0, strikes=0, cap=300) == 300  # capped
    # Without Retry-After: one answer is not yet a pattern; then 2 s, doubled each time.
    assert [backoff_pause(None, n, cap=300) for n in (1, 2, 3, 4, 5)] == [0, 2, 4, 8, 16]
    assert backoff_pause(None, strikes=10_000, cap=300) == 300


def test_backoff_cap_must_be_positive() -> None:
    for bad in (0, -1, "inf", "soon"):
        with pytest.raises(ValueError, match="HOST_BACKOFF_MAX"):
            HostBackoffMiddleware.from_crawler(get_crawler(settings_dict={"HOST_BACKOFF_MAX": bad}))


def test_a_pause_holds_every_workers_leases_of_that_host_and_is_never_shortened(
    workers: Any,  # noqa: F811
) -> None:
    first, second = workers(), workers()
    first.admit(None, [*pages("busy.example", "1", "2"), *pages("b.example", "1")])
    assert first.politeness.pause("busy.example", 1.0) == pytest.approx(1.0, abs=0.05)
    started = time.monotonic()
    assert urls(second.lease(5)) == ["http://b.example/1"]  # only the host that is not paused
    assert 0.5 < second.politeness.paused_for("busy.example") <= 1.0
    assert second.politeness.paused_for("b.example") == 0
    assert second.politeness.pause("busy.example", 0.1) > 0.5  # a shorter pause: no effect
    while second.politeness.paused_for("busy.example") > 0:
        time.sleep(0.05)
    assert time.monotonic() - started >= 0.8
    assert urls(second.lease(5)) == ["http://busy.example/1", "http://busy.example/2"]


def test_answers_without_retry_after_are_counted_across_workers_until_another_answer(
    workers: Any,  # noqa: F811
) -> None:
    first, second = workers(), workers()
    assert first.politeness.strike("busy.example") == 1
    assert second.politeness.strike("busy.example") == 2
    assert second.politeness.strike("other.example") == 1
    first.politeness.clear_strikes("busy.example")
    assert second.politeness.strike("busy.example") == 1


class TooManyRequests:
    """The test site's pages, except that from the ``after``-th request on the server
    answers every request 429 with ``Retry-After: <pause>`` for ``pause`` seconds. Keeps
    the server's own log: when each request arrived, when each 429 was answered."""

    def __init__(self, graph: LinkGraph, pause: int, after: int) -> None:
        self.graph, self.pause, self.after = graph, pause, after
        self.lock = threading.Lock()
        self.served = 0
        self.window_start: float | None = None
        #: (time answered, path, status) of every answer.
        self.answers: list[tuple[float, str, int]] = []

    def __call__(self, path: str) -> Page | None:
        with self.lock:
            now = time.time()
            self.served += 1
            if self.window_start is None and self.served > self.after:
                self.window_start = now
            if self.window_start is not None and now < self.window_start + self.pause:
                page: Page | None = Page(
                    "slow down", status=429, headers={"Retry-After": str(self.pause)}
                )
            elif path == "/robots.txt":
                page = Page("User-agent: *\nAllow: /\n", content_type="text/plain")
            else:
                page = self.graph.page(path)
            self.answers.append((now, path, page.status if page else 404))
            return page


def crawl(
    site: TestServer, tmp_path: Path, count: int, redis_url: str | None, *settings: str
) -> list[str]:
    """``count`` ``scrapy crawl site -s SETTING...`` processes to the end; their logs."""
    processes, logs = [], []
    for number in range(count):
        # STATS_DUMP: the stats this test reads (the add-on keeps the dump at DEBUG otherwise).
        store = tmp_path / f"w{number}.sqlite"
        command = site_crawl_command(f"{site.url}/p/0", store, "-s", "STATS_DUMP=True")
        for setting in (f"REDIS_URL={redis_url}", *settings) if redis_url else settings:
            command += ["-s", setting]
        log = tmp_path / f"w{number}.log"
        logs.append(log)
        with log.open("w") as out:
            processes.append(
                subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
            )
    for process in processes:
        process.wait(timeout=180)
    texts = [log.read_text() for log in logs]
    assert [process.returncode for process in processes] == [0] * count, texts[0][-3000:]
    return texts


def assert_backed_off(site: TestServer, server: TooManyRequests) -> None:
    """No request reached the server after a 429 and before the time it asked (but those
    already on their way), and the crawl then fetched every page."""
    arrivals = [hit.time for hit in site.hits]
    refused = [at for at, _, status in server.answers if status == 429]
    assert refused, "the server never answered 429"
    for answered in refused:
        early = [at for at in arrivals if answered + IN_FLIGHT < at < answered + server.pause]
        assert not early, f"{len(early)} requests within {server.pause}s of a 429 at {answered}"
    assert max(arrivals) > max(refused) + server.pause  # the crawl went on after the pause
    fetched = {path.partition("?")[0] for _, path, status in server.answers if status != 429}
    assert GRAPH.expected_paths() <= fetched


@pytest.mark.slow
@pytest.mark.parametrize("delay", [0.0, 0.3])
def test_two_workers_send_a_host_nothing_before_its_retry_after(
    tmp_path: Path, delay: float
) -> None:
    server = TooManyRequests(GRAPH, pause=5, after=8)  # mid-crawl: both workers busy
    with RedisServer(bloom=True) as redis_server, TestServer({"/*": server}, delay=0.05) as site:
        logs = crawl(site, tmp_path, 2, redis_server.url, f"DOWNLOAD_DELAY={delay}")
    assert_backed_off(site, server)
    assert all("'frontier/leased'" in log for log in logs)
    if delay:  # requests held by the pause took new turns: the delay holds throughout
        arrivals = sorted(hit.time for hit in site.hits)
        assert min(b - a for a, b in itertools.pairwise(arrivals)) >= delay - 0.1


@pytest.mark.slow
def test_an_embedded_crawl_sends_a_host_nothing_before_its_retry_after(tmp_path: Path) -> None:
    server = TooManyRequests(GRAPH, pause=3, after=8)
    with TestServer({"/*": server}, delay=0.05) as site:
        (log,) = crawl(site, tmp_path, 1, None)
    assert_backed_off(site, server)
    assert "'backoff/paused'" in log
