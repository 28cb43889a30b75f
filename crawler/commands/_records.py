"""What the commands reading the record store (``redirects``, ``canonicals``, ``audit-rules``,
``migration-map``) share: their ``--format`` and ``--max-regex`` options and opening the store
a crawl wrote.

Functions, not a base command: Scrapy lists every ``ScrapyCommand`` subclass of this package
as a command named after its module.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

from scrapy.exceptions import UsageError

from bloom_frontier.pipelines.database import StoreMissing
from bloom_frontier.pipelines.reader import StoreReader
from bloom_frontier.redirectmap.nginx import DEFAULT_MAX_REGEX

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings


def add_format_option(parser: argparse.ArgumentParser, formats: Sequence[str]) -> None:
    """``--format``, one of ``formats``; the first is the default."""
    parser.add_argument("--format", choices=formats, default=formats[0])


def add_max_regex_option(parser: argparse.ArgumentParser) -> None:
    """``--max-regex N``: the most regex entries an nginx map may hold."""
    parser.add_argument(
        "--max-regex",
        metavar="N",
        type=int,
        default=DEFAULT_MAX_REGEX,
        help=f"nginx: at most this many regex entries (default {DEFAULT_MAX_REGEX})",
    )


@contextmanager
def reading_store(settings: BaseSettings) -> Iterator[StoreReader]:
    """The store named by ``STORE_URL``, closed when the block ends. A store that does not
    exist is a usage error saying where it was looked for, not a traceback."""
    try:
        store = StoreReader.for_reading(settings)
    except StoreMissing as exc:
        raise UsageError(str(exc), print_help=False) from None
    try:
        yield store
    finally:
        store.close()
