"""``scrapy validate-map MAP --base URL``: a deployed redirect map checked against the site.

Every entry of the map (:func:`bloom_frontier.migration.validate.read_map`) is fetched on
the site at ``--base`` without following redirects, each hop followed by hand through the
SSRF guard and the project's politeness settings, and judged: hops, final page, indexable,
self-canonical, what is wrong (:data:`bloom_frontier.migration.validate.PROBLEMS`). The
report goes to stdout (``--format text|html|csv|jsonl``), the summary line last (on stderr
too for the machine formats); exit status 1 when a row fails, 2 when the check could not
run (an unreadable map, a bad ``--base``, a site that cannot be reached).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import ClassVar

from scrapy.commands import ScrapyCommand
from scrapy.exceptions import UsageError

from bloom_frontier.addon import RESOLVER
from bloom_frontier.commands._failures import CommandFailed, fails_cleanly
from bloom_frontier.migration.validate import (
    FORMATS,
    MapCheckSpider,
    MapInputError,
    Rebase,
    base_origin,
    read_map,
    summary,
    unreachable,
    write_html,
    write_table,
    write_text,
)
from bloom_frontier.ssrf import check_proxy_setup

#: Exit status when the check ran and a row failed (2: it could not run).
EXIT_ROW_FAILED = 1


class Command(ScrapyCommand):
    requires_project = False
    requires_crawler_process = True
    default_settings: ClassVar[dict[str, object]] = {"LOG_ENABLED": False}

    def syntax(self) -> str:
        return "MAP --base URL [--target-base URL] [--format text|html|csv|jsonl]"

    def short_desc(self) -> str:
        return "Check a deployed redirect map on the live site: hops, final page, problems"

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        parser.add_argument(
            "--base",
            help="the deployed site the sources are fetched on (scheme, host, port)",
        )
        parser.add_argument(
            "--target-base",
            help="where the new site's targets are served, when not on --base",
        )
        parser.add_argument("--format", choices=FORMATS, default=FORMATS[0])

    def process_options(self, args: list[str], opts: argparse.Namespace) -> None:
        super().process_options(args, opts)
        if len(args) != 1:
            raise UsageError("give one MAP file (CSV or JSONL)", print_help=False)
        if not opts.base:
            raise UsageError("--base URL is required: the deployed site", print_help=False)
        assert self.settings is not None
        if self.settings.getbool("SSRF_GUARD_ENABLED"):
            # The guard's DNS half, as the add-on installs it for a crawl.
            self.settings.set("TWISTED_DNS_RESOLVER", RESOLVER, "command")

    @fails_cleanly
    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        assert self.settings is not None and self.crawler_process is not None
        check_proxy_setup(self.settings)
        try:
            base = base_origin(opts.base, "--base")
            target_base = opts.target_base and base_origin(opts.target_base, "--target-base")
            rows = read_map(Path(args[0]))
        except MapInputError as exc:
            raise CommandFailed(str(exc)) from None
        if all(row.skip is not None for row in rows):
            raise CommandFailed(
                f"{args[0]} holds no entry to check: all {len(rows)} rows are skipped"
            )
        self.crawler_process.crawl(
            MapCheckSpider,
            rows=rows,
            rebase=Rebase.of(rows, base, target_base),
            max_hops=self.settings.getint("REDIRECT_MAX_HOPS"),
        )
        (crawler,) = self.crawler_process.crawlers
        self.crawler_process.start()
        spider = crawler.spider
        if not isinstance(spider, MapCheckSpider):
            raise CommandFailed("the check did not start (run with -L INFO to see why)")
        verdicts = spider.verdicts
        if any(not verdict.walk.done for verdict in verdicts if verdict.walk.row.skip is None):
            raise CommandFailed("the check stopped before every row was fetched")
        cause = unreachable(verdicts)
        if cause is not None:
            raise CommandFailed(f"cannot reach the site at {base} ({cause}): check --base")
        out = sys.stdout
        if opts.format == "text":
            write_text(verdicts, out)
        elif opts.format == "html":
            write_html(verdicts, out, f"Redirect map check: {args[0]} on {base}")
        else:
            write_table(verdicts, opts.format, out)
        if opts.format != "text":
            print(summary(verdicts), file=sys.stderr)
        if any(verdict.result == "failed" for verdict in verdicts):
            self.exitcode = EXIT_ROW_FAILED
