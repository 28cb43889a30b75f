"""``scrapy seed SPIDER URL... [--file F]``: add start URLs to a shared (Redis) frontier.

Seeds go through the same path as every link (dedupe key, RedisBloom, queue, in one atomic
step), so seeding a URL twice, or seeding one a worker already found, queues it once.
Workers started with ``scrapy crawl SPIDER -s REDIS_URL=...`` lease them.

A URL outside the spider's ``allowed_domains`` is refused here, counted and said why (a
worker would lease it only to fail it as offsite).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, ClassVar

from scrapy import Request
from scrapy.commands import ScrapyCommand
from scrapy.crawler import Crawler
from scrapy.exceptions import UsageError
from scrapy.spiderloader import get_spider_loader
from scrapy.statscollectors import MemoryStatsCollector
from scrapy.utils.url import url_is_from_any_domain

from bloom_frontier.commands._failures import CommandFailed, fails_cleanly
from bloom_frontier.frontier.redis import RedisFrontier
from bloom_frontier.redis_client import command_client

#: Seeds admitted per Redis call.
BATCH = 1000


def read_urls(lines: Iterable[str]) -> Iterator[str]:
    """URLs from a seed file: one per line; blank lines and ``#`` comments skipped."""
    for line in lines:
        url = line.strip()
        if url and not url.startswith("#"):
            yield url


def read_seed_file(path: str) -> list[str]:
    """The URLs of the seed file at ``path`` ('-': stdin); :class:`CommandFailed` saying
    why when it cannot be read as text."""
    try:
        if path == "-":
            return list(read_urls(sys.stdin))
        with Path(path).open(encoding="utf-8") as lines:
            return list(read_urls(lines))
    except UnicodeDecodeError as exc:
        raise CommandFailed(
            f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start}): give a text file "
            "with one URL per line"
        ) from None
    except OSError as exc:
        raise CommandFailed(f"cannot read {path}: {exc.strerror or exc}") from None


def batches(items: Iterable[str], size: int) -> Iterator[list[str]]:
    batch: list[str] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


class Command(ScrapyCommand):
    requires_project = True
    requires_crawler_process = False
    default_settings: ClassVar[dict[str, Any]] = {"LOG_LEVEL": "WARNING"}

    def syntax(self) -> str:
        return "<spider> [URL ...] [--file FILE] -s REDIS_URL=redis://..."

    def short_desc(self) -> str:
        return "Add start URLs to the spider's shared Redis frontier (each queued once)"

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        parser.add_argument(
            "--file", metavar="FILE", help="read URLs from FILE, one per line ('-': stdin)"
        )

    @staticmethod
    def requests(
        urls: Iterable[str], stats: MemoryStatsCollector, allowed_domains: list[str]
    ) -> Iterator[Request]:
        """A request per URL; URLs that are not one, or (when ``allowed_domains`` is not
        empty) whose host is outside those domains, are skipped with a line saying why."""
        for url in urls:
            try:
                request = Request(url)
            except ValueError as exc:  # no scheme, not a string...
                stats.inc_value("dupefilter/invalid/not-a-url")
                print(f"skipped {url!r}: {exc}", file=sys.stderr)
                continue
            if allowed_domains and not url_is_from_any_domain(request.url, allowed_domains):
                stats.inc_value("seed/offsite")
                print(
                    f"skipped {url!r}: outside the spider's allowed_domains "
                    f"({', '.join(allowed_domains)})",
                    file=sys.stderr,
                )
                continue
            yield request

    @fails_cleanly
    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        assert self.settings is not None
        if not args:
            raise UsageError("name the spider whose frontier to seed")
        if not self.settings.get("REDIS_URL"):
            raise UsageError("seeding needs a shared frontier: set REDIS_URL (-s REDIS_URL=...)")
        name, urls = args[0], list(args[1:])
        if opts.file:
            urls += read_seed_file(opts.file)
        if not urls:
            raise UsageError("no URL given (arguments or --file)")
        spidercls = get_spider_loader(self.settings).load(name)
        settings = self.settings.copy()
        spidercls.update_settings(settings)  # the spider's custom_settings, as a crawl sees them
        stats = MemoryStatsCollector(Crawler(spidercls, settings))
        allowed_domains = [d for d in getattr(spidercls, "allowed_domains", None) or [] if d]
        client = command_client(settings["REDIS_URL"])
        frontier = RedisFrontier.from_settings(settings, name, stats, client=client)
        try:
            for batch in batches(urls, BATCH):
                frontier.admit(None, list(self.requests(batch, stats, allowed_domains)))
            if not frontier.flush():
                self.exitcode = 1
                print("Redis became unavailable: not every URL was seeded", file=sys.stderr)
        finally:
            frontier.close()
        values = stats.get_stats()
        invalid = {
            name.rsplit("/", 1)[-1]: count
            for name, count in values.items()
            if name.startswith("dupefilter/invalid/")
        }
        reasons = ", ".join(f"{reason}: {n}" for reason, n in sorted(invalid.items()))
        offsite = values.get("seed/offsite", 0)
        print(
            f"{values.get('seen/new', 0)} queued, {values.get('seen/duplicate', 0)} already "
            f"seen, {sum(invalid.values())} invalid"
            + (f" ({reasons})" if reasons else "")
            + (
                f", {offsite} outside allowed_domains ({', '.join(allowed_domains)})"
                if offsite
                else ""
            )
        )
