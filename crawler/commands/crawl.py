"""``scrapy crawl SPIDER``: Scrapy's own command, after checking what the crawl needs.

An entry point (``bloom_frontier.entry_points.Crawl``), so a user's project that adds the add-on
gets these checks too; a project without the add-on gets Scrapy's command unchanged.

A crawl that cannot work (unknown spider, a setting of the defaults table with a value it may
not have (:mod:`bloom_frontier.validation`), Redis down or refusing the password, a
``REDIS_URL`` or ``STORE_URL`` that is not one, a proxy the SSRF guard cannot vouch for, a
``JOBDIR`` another crawl or a ``rebuild-filter`` is using, a ``METRICS_PORT`` taken or without
the ``[metrics]`` extra, a seen filter (``JOBDIR`` or Redis)
filled under other rules, a spider argument the spider refuses, a ``REQUEST_FINGERPRINTER_CLASS``
that tells apart requests the frontier would merge, a Redis that may evict keys, a crawl
whose state in Redis a worker found lost or damaged)
stops before the engine starts, with one line saying what is wrong and what to do
(:mod:`bloom_frontier.commands._failures`), instead of a traceback from inside the running engine.
A worker that stopped because the crawl's state in Redis was lost
(:mod:`bloom_frontier.frontier.redis.identity`) exits 1, not 0.

A crawl that stops because its record store cannot be written (a full disk, the SQLite file
deleted: :mod:`bloom_frontier.pipelines.recorder`) ends with that line and exit status 2.

Its first SIGTERM or Ctrl-C says what the worker waits for; the second stops it at once
(:mod:`bloom_frontier.stopping`).

A spider checks its ``-a`` arguments here when it has a ``check_arguments(**arguments)``
class method raising :class:`~bloom_frontier.spiders.site.SpiderArgumentError` (as the
``site`` spider does).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from scrapy import Spider
from scrapy.commands.crawl import Command as ScrapyCrawlCommand
from scrapy.crawler import AsyncCrawlerProcess, Crawler, CrawlerProcess
from scrapy.spiderloader import get_spider_loader
from scrapy.utils.job import job_dir
from scrapy.utils.misc import build_from_crawler, load_object
from scrapy.utils.request import RequestFingerprinter

from bloom_frontier.addon import BloomFrontierAddon, check_fingerprinter
from bloom_frontier.canonical.rules import rules_from_settings
from bloom_frontier.commands._failures import CommandFailed, report, reports_failures
from bloom_frontier.compat import asyncio_reactor_path
from bloom_frontier.frontier.redis.identity import LOST_REASON, check_start
from bloom_frontier.frontier.redis.layout import FrontierKeys
from bloom_frontier.frontier.redis.partitions import partition_keys
from bloom_frontier.metrics import MetricsSetupError, check_metrics_setup
from bloom_frontier.pipelines.database import make_engine, store_url_from
from bloom_frontier.pipelines.recorder import FAILED_STAT
from bloom_frontier.pipelines.schema import upgrade_schema
from bloom_frontier.redis_client import command_client, require_bloom
from bloom_frontier.seen.joblock import JobdirLock
from bloom_frontier.seen.layers import (
    RulesMismatch,
    check_rules,
    read_manifest,
    read_rules_file,
    settings_rules_record,
)
from bloom_frontier.spiders.site import SpiderArgumentError
from bloom_frontier.ssrf import check_proxy_setup
from bloom_frontier.stopping import StopControl
from bloom_frontier.validation import check_settings

if TYPE_CHECKING:
    import argparse

    from scrapy.settings import BaseSettings, Settings


def check_spider_arguments(spidercls: type[Spider], arguments: dict[str, Any]) -> None:
    """:class:`CommandFailed` when the spider's ``check_arguments`` refuses ``arguments``
    (its ``-a`` options)."""
    check = getattr(spidercls, "check_arguments", None)
    if check is None:
        return
    try:
        check(**arguments)
    except SpiderArgumentError as error:
        raise CommandFailed(f"spider argument: {error}") from None


def refuse_other_rules(settings: BaseSettings, recorded: dict[str, Any] | None, where: str) -> None:
    """:class:`CommandFailed` when the seen filter at ``where`` was filled under other rules
    (``recorded``; None: a first start, the crawl records its own) than the crawl's. Refused
    later, while Scrapy builds the scheduler, the refusal is followed by Scrapy's own
    ``RuntimeError: Engine slot not assigned``: the engine closes a spider it had not
    finished opening."""
    if recorded is None:
        return
    record = settings_rules_record(settings, rules_from_settings(settings))
    try:
        check_rules(recorded, record, where)
    except RulesMismatch as error:
        raise CommandFailed(str(error)) from None


def check_request_fingerprinter(settings: BaseSettings, spidercls: type[Spider]) -> None:
    """:class:`~bloom_frontier.addon.FrontierConflict` when the project's
    ``REQUEST_FINGERPRINTER_CLASS`` tells apart requests the frontier would merge
    (:func:`~bloom_frontier.addon.check_fingerprinter`); Scrapy's own is not built."""
    path = settings["REQUEST_FINGERPRINTER_CLASS"]
    fingerprinter_cls = load_object(path)
    if fingerprinter_cls is not RequestFingerprinter:
        crawler = Crawler(spidercls, settings)
        check_fingerprinter(build_from_crawler(fingerprinter_cls, crawler), path)


def check_crawl_setup(settings: BaseSettings, spider_name: str, arguments: dict[str, Any]) -> None:
    """Raise the error a user can fix if the crawl of ``spider_name`` with the spider
    ``arguments`` cannot work; each server is given the command timeouts, so this takes
    seconds when one does not answer. ``settings`` are the project's: the add-on's are
    applied to a copy first (its :class:`~bloom_frontier.addon.FrontierConflict` when a
    setting, the request fingerprinter among them, defeats the frontier)."""
    spidercls = get_spider_loader(settings).load(spider_name)
    check_spider_arguments(spidercls, arguments)
    settings = settings.copy()
    spidercls.update_settings(settings)  # its custom_settings, then the add-on's, as Scrapy does
    BloomFrontierAddon.claim(settings)
    check_settings(settings)
    check_proxy_setup(settings)
    check_request_fingerprinter(settings, spidercls)
    try:
        check_metrics_setup(settings)
    except MetricsSetupError as error:
        raise CommandFailed(str(error)) from None
    if settings.get("REDIS_URL"):
        client = command_client(settings["REDIS_URL"])
        prefix = settings["FRONTIER_KEY_PREFIX"] % {"spider": spider_name}
        try:
            require_bloom(client, f"{prefix}:bloom-probe")
            parts = partition_keys(client, FrontierKeys.for_prefix(prefix))
            check_start(client, parts, settings, report=False)  # the worker's log reports
            if manifest := read_manifest(client, prefix):
                current = manifest["current"]
                refuse_other_rules(settings, current["rules"], current["key"])
        finally:
            client.close()
    elif jobdir := job_dir(settings):
        with JobdirLock(jobdir) as lock:  # taken for good by the crawl's frontier
            lock.acquire("scrapy crawl")
        seen_dir = Path(jobdir, "seen")
        refuse_other_rules(settings, read_rules_file(seen_dir), str(seen_dir))
    engine = make_engine(store_url_from(settings))
    try:
        upgrade_schema(engine)  # here, not at the crawl's first write on the loop
    finally:
        engine.dispose()


def uses_addon(settings: BaseSettings) -> bool:
    """The project crawls through the bloom-frontier add-on (``ADDONS``); any other project
    that has this package installed gets Scrapy's ``crawl`` unchanged."""
    for addon, priority in settings.getdict("ADDONS").items():
        loaded = addon
        if isinstance(addon, str):
            try:
                loaded = load_object(addon)
            except (ImportError, NameError, ValueError):
                continue  # Scrapy reports it itself when it loads the add-ons
        if (
            priority is not None
            and isinstance(loaded, type)
            and issubclass(loaded, BloomFrontierAddon)
        ):
            return True
    return False


def crawler_process(settings: Settings) -> CrawlerProcess | AsyncCrawlerProcess:
    """The process ``scrapy.cmdline`` would make for a crawl, made after the checks (making
    it configures logging and logs Scrapy's banner, which a one-line error should not
    follow)."""
    asyncio_reactor = settings["TWISTED_REACTOR"] == asyncio_reactor_path()
    if (asyncio_reactor and not settings.getbool("FORCE_CRAWLER_PROCESS")) or not settings.getbool(
        "TWISTED_REACTOR_ENABLED"
    ):
        return AsyncCrawlerProcess(settings)
    return CrawlerProcess(settings)


class Command(ScrapyCrawlCommand):
    requires_crawler_process = False  # made in run(), after the checks
    crawler: Crawler | None = None

    def _create_crawler(self, spidercls: type[Spider] | str) -> Crawler:
        self.crawler = super()._create_crawler(spidercls)
        return self.crawler

    @reports_failures
    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        assert self.settings is not None
        addon = len(args) == 1 and uses_addon(self.settings)
        if addon:
            check_crawl_setup(self.settings, args[0], opts.spargs)
        self.crawler_process = crawler_process(self.settings)
        stop = None
        if addon and self.settings.getbool("TWISTED_REACTOR_ENABLED"):
            stop = StopControl(self.crawler_process)
            stop.install()
        super().run(args, opts)
        if stop is not None:
            stop.exit_if_forced()
        stats = self.crawler.stats if self.crawler is not None else None
        # A crawl stopped because its record store could not be written ends with why.
        if stats is not None and (failed := stats.get_value(FAILED_STAT)):
            report(self, CommandFailed(failed))
        elif stats is not None and stats.get_value("finish_reason") == LOST_REASON:
            self.exitcode = 1  # the frontier's state was lost (its worker said so): not "finished"
