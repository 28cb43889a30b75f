"""``scrapy redirects``: the redirect map from the record store, as a migration deploys it.

What every format says is stated once, in :mod:`bloom_frontier.redirectmap.semantics` (one row per
redirect source, target, status, which rows are entries). Formats:

* ``jsonl`` (default), ``csv``: every source, chain level: source, target, status, hops, every
  hop's status, permanent end to end, outcome, final status, flag, entry and why not;
* ``bulk``: ``source,target,status`` for the entries, as CDNs and hosting platforms import;
* ``nginx``: a file to include in ``http {}`` (:mod:`bloom_frontier.redirectmap.nginx`);
* ``apache``: rules to include in a ``<VirtualHost>`` (:mod:`bloom_frontier.redirectmap.apache`);
* ``html``: the redirect audit report (:mod:`bloom_frontier.redirectmap.report`);
* ``hops``: the recorded hops themselves, one JSON line each
  (``{"from", "to", "status", "permanent", "via"}``): what the crawl saw, not a map (the
  shape the messy-site scorer reads).

Whatever a server format has to leave out is said on stderr, one line each.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any, ClassVar

from scrapy.commands import ScrapyCommand

from bloom_frontier.canonical.rules import rules_from_settings
from bloom_frontier.commands._failures import fails_cleanly
from bloom_frontier.commands._records import (
    add_format_option,
    add_max_regex_option,
    reading_store,
)
from bloom_frontier.pipelines.reader import StoredChain
from bloom_frontier.pipelines.records import write_rows
from bloom_frontier.redirectmap.report import canonical_judge, write_report
from bloom_frontier.redirectmap.semantics import (
    COLUMNS,
    MapOptions,
    own_hosts,
    redirect_sources,
)
from bloom_frontier.redirectmap.servermap import write_server_map
from bloom_frontier.shorteners import shorteners_from_settings

FORMATS = ("jsonl", "csv", "bulk", "nginx", "apache", "html", "hops")
HOP_COLUMNS = ("from", "to", "status", "permanent", "via")


def hop_rows(chains: Iterable[StoredChain]) -> Iterator[dict[str, Any]]:
    """Each distinct recorded hop once, in the order first recorded."""
    written: set[tuple[str, int, str]] = set()
    for chain in chains:
        for hop in chain.hops:
            row = {
                "from": hop.source_url,
                "to": hop.target_url or hop.location,
                "status": hop.status,
                "permanent": hop.permanent,
                "via": hop.via,
            }
            if (identity := (hop.source_url, hop.status, row["to"])) not in written:
                written.add(identity)
                yield row


def dated(chains: Iterable[StoredChain]) -> str:
    """When the redirects were recorded and the report written (UTC), for its header."""
    times = [chain.recorded_at for chain in chains]

    def day(at: float) -> str:
        return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M UTC")

    crawled = f"redirects recorded {day(min(times))} to {day(max(times))}; " if times else ""
    return f"{crawled}report written {day(time.time())}"


class Command(ScrapyCommand):
    requires_project = True
    requires_crawler_process = False
    default_settings: ClassVar[dict[str, Any]] = {"LOG_ENABLED": False}

    def syntax(self) -> str:
        return (
            "[--format jsonl|csv|bulk|nginx|apache|html|hops] [--permanent-only] "
            "[--include-flagged] [--keep-tracking] [--host HOST]... [--max-regex N]"
        )

    def short_desc(self) -> str:
        return "Print the redirect map (each source and where it finally leads) from the store"

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        add_format_option(parser, FORMATS)
        parser.add_argument(
            "--permanent-only",
            action="store_true",
            help="only sources whose whole rest of chain is permanent (301/308)",
        )
        parser.add_argument(
            "--include-flagged",
            action="store_true",
            help="make entries of chains flagged soft-404 (login, home page, country selector)",
        )
        parser.add_argument(
            "--keep-tracking",
            action="store_true",
            help="keep the tracking parameters a target was served with",
        )
        parser.add_argument(
            "--host",
            action="append",
            default=[],
            help="one more of the crawl's own hosts (e.g. an old host that only redirects)",
        )
        add_max_regex_option(parser)

    @fails_cleanly
    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        assert self.settings is not None
        rules = rules_from_settings(self.settings)
        options = MapOptions(
            permanent_only=opts.permanent_only,
            include_flagged=opts.include_flagged,
            keep_tracking=opts.keep_tracking,
            hosts=frozenset(opts.host),
            rules=rules,
            shorteners=shorteners_from_settings(self.settings),
        )
        with reading_store(self.settings) as store:
            chains = store.chains()
            pages = list(store.pages())
            hints = list(store.hints()) if opts.format == "html" else []
        out = sys.stdout
        if opts.format == "hops":
            write_rows(hop_rows(chains), "jsonl", HOP_COLUMNS, out)
            return
        rows = redirect_sources(chains, pages, options)
        if opts.format in ("jsonl", "csv"):
            write_rows((row.as_dict() for row in rows), opts.format, COLUMNS, out)
            return
        if opts.format == "html":
            site = ", ".join(sorted(own_hosts(chains, pages, options.hosts, options.shorteners)))
            write_report(rows, hints, canonical_judge(chains, pages), out, site, dated(chains))
            return
        served = [str(page["final_url"]) for page in pages]
        written = write_server_map(rows, opts.format, out, rules, served, opts.max_regex)
        if written.regex_count is not None:
            print(
                f"redirects: {written.regex_count} regex entries written (cap {opts.max_regex})",
                file=sys.stderr,
            )
        for problem in written.left_out:
            print(f"redirects: {problem}", file=sys.stderr)
