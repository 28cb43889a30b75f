"""``scrapy canonicals``: every rel=canonical hint the crawl saw, with its verdict.

One row per distinct (page, canonical, verdict): ``{"page", "canonical", "valid", "reason",
"problem"}`` in ``jsonl`` (default; usable as is as a canonical-hints export) or ``csv``.
``problem`` says when a valid hint points at a URL that redirects (``redirects``) or was
fetched with another status than 200 (``status-<n>``), as the redirect audit report counts
them. ``--valid-only`` keeps the accepted ones.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any, ClassVar

from scrapy.commands import ScrapyCommand

from bloom_frontier.commands._failures import fails_cleanly
from bloom_frontier.commands._records import add_format_option, reading_store
from bloom_frontier.pipelines.records import write_rows
from bloom_frontier.redirectmap.report import canonical_judge

COLUMNS = ("page", "canonical", "valid", "reason", "problem")


def hint_rows(
    hints: Iterable[dict[str, Any]],
    valid_only: bool = False,
    problem: Callable[[dict[str, Any]], str | None] = lambda hint: None,
) -> Iterator[dict[str, Any]]:
    """Stored hints as export rows, each distinct row once; ``problem`` judges the URL
    each hint points at."""
    written: set[tuple[Any, ...]] = set()
    for hint in hints:
        if valid_only and not hint["valid"]:
            continue
        row = {
            "page": hint["page_url"],
            "canonical": hint["canonical_url"] or hint["href"],
            "valid": bool(hint["valid"]),
            "reason": hint["reason"],
            "problem": problem(hint),
        }
        identity = tuple(row.values())
        if identity not in written:
            written.add(identity)
            yield row


class Command(ScrapyCommand):
    requires_project = True
    requires_crawler_process = False
    default_settings: ClassVar[dict[str, Any]] = {"LOG_ENABLED": False}

    def syntax(self) -> str:
        return "[--format jsonl|csv] [--valid-only]"

    def short_desc(self) -> str:
        return "Print the rel=canonical hints from the store, each with its verdict"

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        add_format_option(parser, ("jsonl", "csv"))
        parser.add_argument("--valid-only", action="store_true", help="only accepted hints")

    @fails_cleanly
    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        assert self.settings is not None
        with reading_store(self.settings) as store:
            judge = canonical_judge(store.chains(), list(store.pages()))
            rows = hint_rows(store.hints(), opts.valid_only, judge)
            write_rows(rows, opts.format, COLUMNS, sys.stdout)
