"""``scrapy frontier SPIDER [--watch [SECONDS]] [--json]``: live status of a shared (Redis)
frontier (leases per worker now, totals, rates, elapsed time; ``--watch`` stops once the crawl
finished); ``--metrics``: the crawl-wide figures in Prometheus' text format
(:mod:`bloom_frontier.metrics`); ``--failed``: the requests that failed for good, with their
reasons;
``scrapy frontier SPIDER --reset --yes``: clear it so the same crawl can run again.

``--serve PORT`` serves the crawl's progress over time as one web page
(:mod:`bloom_frontier.frontier.liveview`).

``--quarantine`` lists the stored requests in quarantine (:mod:`bloom_frontier.frontier.redis.
quarantine`); ``--requeue-quarantined ID...|all`` and ``--drop-quarantined ID...|all`` act on
them.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, ClassVar

from scrapy.commands import ScrapyCommand
from scrapy.exceptions import UsageError
from scrapy.spiderloader import get_spider_loader

from bloom_frontier.commands._failures import CommandFailed, fails_cleanly
from bloom_frontier.frontier import liveview
from bloom_frontier.frontier.politeness import HostLimits
from bloom_frontier.frontier.redis import quarantine
from bloom_frontier.frontier.redis.identity import check_readable
from bloom_frontier.frontier.redis.layout import FrontierKeys
from bloom_frontier.frontier.redis.partitions import partition_keys
from bloom_frontier.frontier.reset import CrawlStillRunning, crawl_keys, reset_crawl
from bloom_frontier.frontier.status import crawl_name, failed_requests, read_status
from bloom_frontier.metrics import crawl_metrics
from bloom_frontier.redis_client import Client, command_client, require_bloom

#: ANSI: cursor home, clear screen - --watch redraws in place.
CLEAR_SCREEN = "\x1b[H\x1b[2J"
#: Characters of a quarantined payload --quarantine shows (--json shows what is kept).
PAYLOAD_PREVIEW = 200


class Command(ScrapyCommand):
    requires_project = True
    requires_crawler_process = False
    default_settings: ClassVar[dict[str, Any]] = {"LOG_LEVEL": "WARNING"}

    def syntax(self) -> str:
        return (
            "<spider> [--watch [SECONDS]] [--json] | --serve PORT | --metrics | "
            "--failed [--json] | --quarantine | --reset --yes  -s REDIS_URL=redis://..."
        )

    def short_desc(self) -> str:
        return (
            "Show a shared frontier: pages and rates, queue, leases per worker, failures, "
            "Bloom fill and error"
        )

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        parser.add_argument(
            "--watch",
            nargs="?",
            const=2.0,
            type=float,
            metavar="SECONDS",
            help="refresh in place every SECONDS (default 2); stops (exit 0) once the crawl "
            "finished: it started, nothing is queued or leased and no worker is alive",
        )
        parser.add_argument(
            "--json",
            action="store_true",
            help="one JSON object per reading (with --failed, --quarantine: per record)",
        )
        parser.add_argument(
            "--serve",
            type=int,
            metavar="PORT",
            help="serve the crawl's progress over time as a web page on PORT (0: any free "
            "port), read every FRONTIER_STATUS_INTERVAL seconds (or --watch SECONDS); Ctrl-C "
            "stops it",
        )
        parser.add_argument(
            "--serve-address",
            default="127.0.0.1",
            metavar="ADDRESS",
            help="the address --serve listens on (default 127.0.0.1, this machine only)",
        )
        parser.add_argument(
            "--metrics",
            action="store_true",
            help="print the crawl-wide figures once, in Prometheus' text format "
            "(docs/metrics.md; needs the [metrics] extra)",
        )
        parser.add_argument(
            "--failed",
            action="store_true",
            help="list the requests that failed for good: when, URL, attempts, reason",
        )
        parser.add_argument(
            "--quarantine",
            action="store_true",
            help="list the stored requests in quarantine (reason, time, payload)",
        )
        parser.add_argument(
            "--requeue-quarantined",
            nargs="+",
            metavar="ID",
            help="queue these quarantined requests again ('all': every one)",
        )
        parser.add_argument(
            "--drop-quarantined",
            nargs="+",
            metavar="ID",
            help="delete these quarantine records ('all': every one)",
        )
        parser.add_argument(
            "--reset",
            action="store_true",
            help="delete the crawl's shared state (queue, leases, seen filter, failures, "
            "politeness, status, limits) so the same crawl can run again; needs --yes",
        )
        parser.add_argument("--yes", action="store_true", help="confirm --reset")

    @fails_cleanly
    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        if len(args) != 1:
            raise UsageError("name one spider")
        assert self.settings is not None
        url = self.settings.get("REDIS_URL")
        if not url:
            raise UsageError("set REDIS_URL (environment or -s REDIS_URL=...)")
        get_spider_loader(self.settings).load(args[0])  # an unknown name is a typo, say so
        prefix = self.settings["FRONTIER_KEY_PREFIX"] % {"spider": args[0]}
        error_rate = self.settings.getfloat("SEEN_FILTER_ERROR_RATE")
        limits = HostLimits.from_settings(self.settings)
        client = command_client(url)
        if opts.reset:
            try:
                self.reset(client, FrontierKeys.for_prefix(prefix), opts.yes)
            finally:
                client.close()
            return
        try:
            # A key of the wrong type, a crawl a worker found damaged: one line, exit 2.
            check_readable(client, partition_keys(client, FrontierKeys.for_prefix(prefix)))
            if opts.quarantine or opts.requeue_quarantined or opts.drop_quarantined:
                self.quarantine(client, FrontierKeys.for_prefix(prefix), opts)
                return
            if opts.failed:
                self.failed(client, prefix, opts.json)
                return
            require_bloom(client, f"{prefix}:bloom-probe")  # the status reads BF.INFO
            if opts.serve is not None:
                self.serve(client, prefix, error_rate, limits, opts)
                return
            if opts.metrics:
                print(crawl_metrics(client, prefix, error_rate, limits), end="", flush=True)
                return
            while True:
                status = read_status(client, prefix, error_rate, limits)
                if opts.json:
                    print(status.to_json(), flush=True)
                else:
                    prefix_text = CLEAR_SCREEN if opts.watch else ""
                    print(prefix_text + status.render(), flush=True)
                if not opts.watch:
                    return
                if status.state == "finished":
                    if not opts.json:
                        print(f"crawl {status.name} finished: --watch stops", flush=True)
                    return
                time.sleep(opts.watch)
        except KeyboardInterrupt:
            sys.stdout.write("\n")
        finally:
            client.close()

    def serve(
        self,
        client: Client,
        prefix: str,
        error_rate: float,
        limits: HostLimits,
        opts: argparse.Namespace,
    ) -> None:
        """Serve the live view (:mod:`bloom_frontier.frontier.liveview`) until Ctrl-C."""
        assert self.settings is not None
        interval = opts.watch or self.settings.getfloat("FRONTIER_STATUS_INTERVAL")
        if opts.json or interval <= 0 or not 0 <= opts.serve <= 65535:
            raise UsageError("--serve takes a PORT (0 to 65535), a positive interval, no --json")
        view = liveview.LiveView(
            lambda: read_status(client, prefix, error_rate, limits),
            lambda clock: liveview.read_hosts(client, prefix, clock),
            interval,
        )
        try:
            liveview.serve(view, opts.serve_address, opts.serve, crawl_name(prefix))
        except liveview.ServeFailed as error:
            raise CommandFailed(str(error)) from error

    @classmethod
    def quarantine(cls, client: Client, keys: FrontierKeys, opts: argparse.Namespace) -> None:
        """List, requeue or drop quarantined requests (of every partition)."""
        parts = partition_keys(client, keys)
        if opts.requeue_quarantined:
            requeued = kept = 0
            for index, ids in quarantine.by_partition(opts.requeue_quarantined, len(parts)).items():
                done, left = quarantine.requeue(client, parts[index], ids)
                requeued, kept = requeued + done, kept + left
            print(f"{requeued} requeued, {kept} kept (payload cut or record not readable)")
        if opts.drop_quarantined:
            groups = quarantine.by_partition(opts.drop_quarantined, len(parts))
            dropped = sum(quarantine.drop(client, parts[i], ids) for i, ids in groups.items())
            print(f"{dropped} dropped")
        if not opts.quarantine:
            return
        for index, part in enumerate(parts):
            for record in quarantine.records(client, part):
                if len(parts) > 1:
                    record["id"] = f"{record.get('id')}@{index}"
                cls.print_record(record, opts)

    @staticmethod
    def failed(client: Client, prefix: str, as_json: bool) -> None:
        """List the crawl's failed requests, oldest first (one JSON object each with
        ``--json``); one line saying so when there are none."""
        found = failed_requests(client, prefix)
        if as_json:
            for failure in found:
                print(json.dumps(failure, sort_keys=True), flush=True)
            return
        if not found:
            print(f"no failed requests in crawl {crawl_name(prefix)}")
            return
        print(f"{len(found)} failed request(s) in crawl {crawl_name(prefix)}, oldest first:")
        for failure in found:
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(failure["failed_at"] or 0))
            attempts = failure["attempts"]
            tried = f"{attempts} attempt{'s' if attempts != 1 else ''}" if attempts else "?"
            print(f"{when}Z  {failure['url']}  ({tried})")
            print(f"    {failure['reason']}")

    @staticmethod
    def print_record(record: dict, opts: argparse.Namespace) -> None:
        """One quarantine record, as JSON or for a person."""
        if opts.json:
            print(json.dumps(record, sort_keys=True), flush=True)
            return
        when = time.strftime(
            "%Y-%m-%d %H:%M:%S", time.gmtime(float(record.get("quarantined_at") or 0))
        )
        payload = str(record.get("payload", ""))
        print(f"{record.get('id')}  {when}Z  {record.get('reason')}")
        more = " ..." if len(payload) > PAYLOAD_PREVIEW else ""
        print(f"    {payload[:PAYLOAD_PREVIEW]!r}{more}")

    def reset(self, client: Client, keys: FrontierKeys, confirmed: bool) -> None:
        """Clear the crawl under ``keys`` (only with ``--yes``); one line on the outcome,
        exit code 1 when refused."""
        if not confirmed:
            found = sum(1 for _ in crawl_keys(client, keys))
            print(
                f"--reset would delete {found} keys of crawl {keys.prefix}; add --yes to confirm",
                file=sys.stderr,
            )
            self.exitcode = 1
            return
        try:
            deleted = reset_crawl(client, keys)
        except CrawlStillRunning as exc:
            print(exc, file=sys.stderr)
            self.exitcode = 1
            return
        print(f"reset {keys.prefix}: {deleted} keys deleted; the next crawl starts afresh")
