"""Real crawls that watch Scrapy's engine from inside; each prints what it saw (JSON on stdout).

``python -m tests.engine_probe SCENARIO SITE_URL [REDIS_URL]``, or :func:`probe` from a
test: run in a subprocess, as a Twisted reactor starts once per process.

- ``internals``: Scrapy's own settings and scheduler (nothing of the project but
  :mod:`bloom_frontier.compat`), a site with ``/a``, ``/b``, ``/c``: each compat function is
  used on the running engine and downloader, and what followed is timed;
- ``drain``: the project's shared crawl (``REDIS_URL``) of a one-page site whose answer
  reaches the frontier :data:`SLOW_ANSWER` seconds after the page: when the engine started,
  when the response came and when the spider closed;
- ``gc`` / ``gc-off``: the project's embedded crawl of a site (``GC_FREEZE_ENABLED`` on /
  off) whose callbacks drop reference cycles: the collector's freeze count and threshold
  before and during the crawl, every collection it ran while the engine ran (from
  ``gc.callbacks``: its generation, the young objects counted when it started, what it
  collected), and how many cycles were collected by the time the spider closed.
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from scrapy import Request, Spider, signals
from scrapy.core.scheduler import Scheduler
from scrapy.crawler import CrawlerProcess
from scrapy.exceptions import DontCloseSpider
from scrapy.http import Response
from scrapy.utils.asyncio import call_later
from scrapy.utils.project import get_project_settings

from bloom_frontier import compat
from bloom_frontier.spiders.site import SiteSpider

ROOT = Path(__file__).resolve().parent.parent
#: Scrapy's engine asks its scheduler on its own every this many seconds (its heartbeat).
HEARTBEAT = 5.0
#: Seconds between queueing a request behind the engine's back and waking the engine.
WAKE_AFTER = 0.3
#: Seconds the probe holds its host's download slot.
HOLD_FOR = 1.0
CONCURRENT_REQUESTS = 4
DOWNLOAD_DELAY = 0.05
#: Seconds a page's answer takes to reach the frontier (``drain``): its lease is still held
#: when the engine handles the page, so the end comes from a later lease.
SLOW_ANSWER = 0.5
#: Cycles each page's callback drops (``gc`` scenarios).
CYCLES_PER_PAGE = 1000

seen: dict[str, Any] = {}


def probe(scenario: str, site: str, *args: str) -> dict[str, Any]:
    """What ``scenario`` saw in its crawl of ``site``, run in a subprocess."""
    result = subprocess.run(
        [sys.executable, "-m", "tests.engine_probe", scenario, site, *args],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.splitlines()[-1])


class RecordingScheduler(Scheduler):
    """Scrapy's scheduler, noting when each request leaves it."""

    def next_request(self) -> Request | None:
        request = super().next_request()
        if request is not None:
            seen.setdefault("dequeued", {})[request.url.rsplit("/", 1)[-1]] = time.monotonic()
        return request


class InternalsSpider(Spider):
    """Crawls ``/a``, then ``/b`` (queued past the engine, then the engine woken), then
    ``/c`` (with its slot held); stays open until ``/c`` is parsed."""

    name = "compat-internals"

    def __init__(self, site: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.site = site
        self.done = False

    @classmethod
    def from_crawler(cls, crawler: Any, *args: Any, **kwargs: Any) -> InternalsSpider:
        spider = super().from_crawler(crawler, *args, **kwargs)
        crawler.signals.connect(spider.reached, signal=signals.request_reached_downloader)
        crawler.signals.connect(spider.idle, signal=signals.spider_idle)
        return spider

    async def start(self) -> Any:  # type: ignore[override]
        yield Request(f"{self.site}/a", callback=self.parse_a)

    def reached(self, request: Request) -> None:
        if request.url.endswith("/a"):
            seen["room"] = compat.download_room(self.crawler.engine.downloader)

    def idle(self) -> None:
        if not self.done:
            raise DontCloseSpider

    def parse_a(self, response: Response) -> None:
        slots = compat.download_slots(self.crawler.engine.downloader)
        seen["slots"] = {key: slot.delay for key, slot in slots.items()}
        call_later(0.5, self.queue_b)  # the engine is idle by then

    def queue_b(self) -> None:
        """What the shared scheduler does when leases land: the request is in the
        scheduler, and only waking the engine makes it ask."""
        scheduler = self.crawler.engine._slot.scheduler
        scheduler.enqueue_request(Request(f"{self.site}/b", callback=self.parse_b))
        seen["queued"] = time.monotonic()
        call_later(WAKE_AFTER, self.wake)

    def wake(self) -> None:
        seen["woken"] = time.monotonic()
        compat.wake_engine(self.crawler.engine)

    def parse_b(self, response: Response) -> Iterator[Request]:
        downloader = self.crawler.engine.downloader
        slot = compat.download_slots(downloader)[response.request.meta["download_slot"]]
        compat.hold_download_slot(downloader, slot, HOLD_FOR)
        seen["held"] = time.time()
        yield Request(f"{self.site}/c", callback=self.parse_c)

    def parse_c(self, response: Response) -> None:
        self.done = True


class Cycle:
    collected = 0

    def __init__(self) -> None:
        self.me = self

    def __del__(self) -> None:
        Cycle.collected += 1


class GarbageSpider(SiteSpider):
    """The project's site spider; each page also drops :data:`CYCLES_PER_PAGE` cycles."""

    name = "gc-probe"

    def parse(self, response: Response) -> Any:
        if "freeze_count" not in seen:
            seen["freeze_count"] = gc.get_freeze_count()
            seen["threshold"] = gc.get_threshold()[0]
        for _ in range(CYCLES_PER_PAGE):
            Cycle()
        seen["cycles"] = seen.get("cycles", 0) + CYCLES_PER_PAGE
        return super().parse(response)


def watch_collections(info_store: list[dict[str, int]]) -> Any:
    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            info_store.append({"generation": info["generation"], "young": gc.get_count()[0]})
        else:
            info_store[-1]["collected"] = info["collected"]

    return callback


def internals(site: str) -> None:
    settings = {
        "SCHEDULER": f"{__name__}.RecordingScheduler",
        "CONCURRENT_REQUESTS": CONCURRENT_REQUESTS,
        "DOWNLOAD_DELAY": DOWNLOAD_DELAY,
        "ROBOTSTXT_OBEY": False,
        "TELNETCONSOLE_ENABLED": False,
        "LOG_LEVEL": "WARNING",
    }
    process = CrawlerProcess(settings)
    process.crawl(InternalsSpider, site=site)
    process.start()


def drain(site: str, redis_url: str) -> None:
    settings = get_project_settings()
    settings.set("LOG_LEVEL", "WARNING")
    settings.set("REDIS_URL", redis_url)
    settings.set("EXTENSIONS", {"tests.slow_workers.SlowRecordCommits": 0})
    settings.set("SLOW_RECORDS_SECONDS", SLOW_ANSWER)
    process = CrawlerProcess(settings)
    crawler = process.create_crawler(SiteSpider)

    def started() -> None:
        seen["started"] = time.monotonic()

    def responded() -> None:
        seen["last_response"] = time.monotonic()

    def closed() -> None:
        seen["closed"] = time.monotonic()

    crawler.signals.connect(started, signal=signals.engine_started)
    crawler.signals.connect(responded, signal=signals.response_received)
    crawler.signals.connect(closed, signal=signals.spider_closed)
    process.crawl(crawler, start_url=f"{site}/")
    process.start()


def garbage(site: str, enabled: bool) -> None:
    settings = get_project_settings()
    settings.set("LOG_LEVEL", "WARNING")
    settings.set("GC_FREEZE_ENABLED", enabled)
    process = CrawlerProcess(settings)
    crawler = process.create_crawler(GarbageSpider)
    collections: list[dict[str, int]] = []
    callback = watch_collections(collections)

    def started() -> None:  # after every spider_opened handler: the crawl proper
        seen["freeze_before"] = freeze_before
        gc.callbacks.append(callback)

    def closed() -> None:
        gc.callbacks.remove(callback)
        seen["collections"] = collections
        seen["collected_cycles"] = Cycle.collected

    crawler.signals.connect(started, signal=signals.engine_started)
    crawler.signals.connect(closed, signal=signals.spider_closed)
    freeze_before = gc.get_freeze_count()
    seen["threshold_before"] = gc.get_threshold()[0]
    process.crawl(crawler, start_url=f"{site}/")
    process.start()


def main(scenario: str, site: str, redis_url: str = "") -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", compat.ScrapyInternalsChanged)
        if scenario == "internals":
            internals(site)
        elif scenario == "drain":
            drain(site, redis_url)
        else:
            garbage(site, enabled=scenario == "gc")
    seen["warnings"] = [
        str(w.message) for w in caught if issubclass(w.category, compat.ScrapyInternalsChanged)
    ]
    print(json.dumps(seen))


if __name__ == "__main__":
    main(*sys.argv[1:])
