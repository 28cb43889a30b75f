"""``scrapy redirects``: the transitive redirect map from the record store.

Every recorded hop is an edge from its source's dedupe key to its target (the newest record
wins when a site changed between crawls). Each hop's ``final`` is where following the map
from it ends, and ``outcome`` how: ``fetched`` (a page was downloaded there), ``seen``
(nothing more is known about the target: it was not fetched again), ``loop``, ``blocked``,
``too-many-hops`` or ``error``. Loops are walked once, never followed for ever.

Formats: ``jsonl`` (default) writes one line per hop,
``{"from", "to", "status", "permanent", "via", "final", "outcome", "flag"}`` - usable as is as
a redirect-map export; ``csv`` the same columns; ``nginx`` a ``map`` block from each resolved
source path to its final URL, unresolved ones as comments. ``--permanent-only`` keeps the
permanent (301/308) hops, and resolves through them alone.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, TextIO
from urllib.parse import urlsplit

from scrapy.commands import ScrapyCommand

from crawler.commands._failures import fails_cleanly
from crawler.commands._records import add_format_option, reading_store
from pipelines.records import FETCHED, LOOP, SEEN, write_rows
from pipelines.store import StoredChain, StoredHop

COLUMNS = ("from", "to", "status", "permanent", "via", "final", "outcome", "flag")


@dataclass(frozen=True)
class Resolution:
    final: str | None
    outcome: str
    flag: str | None


def node_of(key: str | None, url: str) -> str:
    """A URL's node in the map: its dedupe key (its text when it has none)."""
    return key or url


def target_node(hop: StoredHop) -> str:
    """Where a hop leads in the map (a junk ``Location`` is a node of its own)."""
    return node_of(hop.target_key, hop.target_url or hop.location)


class RedirectMap:
    """Recorded hops as a graph over dedupe keys, and what is known about where chains ended.

    A hop whose target has its source's key (``http`` -> ``https``) is a row of the map but
    no edge of the graph: the next hop from that key continues the walk.
    """

    def __init__(
        self,
        chains: Iterable[StoredChain],
        fetched_keys: Iterable[str] = (),
        permanent_only: bool = False,
    ) -> None:
        self.hops: dict[tuple[str, int, str], tuple[StoredHop, StoredChain]] = {}
        self.edges: dict[str, StoredHop] = {}
        self.ends: dict[str, StoredChain] = {}
        self.fetched = set(fetched_keys)
        for chain in chains:  # oldest first: newer records overwrite
            for hop in chain.hops:
                if permanent_only and not hop.permanent:
                    continue
                self.hops[(hop.source_url, hop.status, hop.target_url or hop.location)] = (
                    hop,
                    chain,
                )
                source = node_of(hop.source_key, hop.source_url)
                if source != target_node(hop):
                    self.edges[source] = hop
            if chain.outcome != SEEN:
                end = (
                    target_node(chain.hops[-1])
                    if chain.hops
                    else node_of(chain.start_key, chain.start_url)
                )
                self.ends[end] = chain

    def resolve(self, hop: StoredHop, chain: StoredChain) -> Resolution:
        """Follow the map from ``hop`` to where it ends."""
        visited = {node_of(hop.source_key, hop.source_url)}
        last = hop
        current = target_node(hop)
        while current in self.edges:
            if current in visited:
                return Resolution(None, LOOP, None)
            visited.add(current)
            last = self.edges[current]
            current = target_node(last)
        final = last.target_url or last.location
        ended = self.ends.get(current)
        if ended is not None:
            return Resolution(None if ended.outcome == LOOP else final, ended.outcome, ended.flag)
        if current in self.fetched:
            return Resolution(final, FETCHED, chain.flag)
        return Resolution(final, SEEN, chain.flag)

    def rows(self) -> Iterator[dict[str, Any]]:
        """One row per distinct hop, in the order they were recorded."""
        for hop, chain in sorted(
            self.hops.values(), key=lambda item: (item[1].recorded_at, item[0].position)
        ):
            resolution = self.resolve(hop, chain)
            yield {
                "from": hop.source_url,
                "to": hop.target_url or hop.location,
                "status": hop.status,
                "permanent": hop.permanent,
                "via": hop.via,
                "final": resolution.final,
                "outcome": resolution.outcome,
                "flag": resolution.flag,
            }


def nginx_quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def write_nginx(rows: Iterable[dict[str, Any]], out: TextIO) -> int:
    """An nginx ``map`` of request URIs to final URLs (flagged and unresolved as comments)."""
    out.write(
        "# Generated by `scrapy redirects --format nginx`. Use with:\n"
        "#   if ($redirect_target) { return 301 $redirect_target; }\n"
        "map $request_uri $redirect_target {\n"
    )
    count = 0
    for row in rows:
        parts = urlsplit(row["from"])
        uri = parts.path + (f"?{parts.query}" if parts.query else "")
        if row["outcome"] in {FETCHED, SEEN} and row["final"] and not row["flag"]:
            out.write(f"    {nginx_quote(uri)} {nginx_quote(row['final'])};\n")
            count += 1
        else:
            reason = row["flag"] or row["outcome"]
            out.write(f"    # {uri.replace(chr(10), ' ')}: {reason}\n")
    out.write("}\n")
    return count


class Command(ScrapyCommand):
    requires_project = True
    requires_crawler_process = False
    default_settings: ClassVar[dict[str, Any]] = {"LOG_ENABLED": False}

    def syntax(self) -> str:
        return "[--format jsonl|csv|nginx] [--permanent-only]"

    def short_desc(self) -> str:
        return "Print the redirect map (each hop and where it finally leads) from the store"

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        add_format_option(parser, ("jsonl", "csv", "nginx"))
        parser.add_argument(
            "--permanent-only",
            action="store_true",
            help="only permanent (301/308) hops, resolved through permanent hops",
        )

    @fails_cleanly
    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        assert self.settings is not None
        with reading_store(self.settings) as store:
            fetched = (page["key"] for page in store.pages() if page["key"])
            rows = RedirectMap(store.chains(), fetched, opts.permanent_only).rows()
            if opts.format == "nginx":
                write_nginx(rows, sys.stdout)
            else:
                write_rows(rows, opts.format, COLUMNS, sys.stdout)
