"""A redirect map in a server's format (``bulk``, ``nginx``, ``apache``) from source rows: the
one writer of ``scrapy redirects`` and ``scrapy migration-map``, so both match, collapse and
check their sources alike (:func:`~bloom_frontier.redirectmap.matching.server_entries`).
"""

from __future__ import annotations

import contextlib
import csv
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TextIO

from bloom_frontier.canonical.rules import DEFAULT_RULES, RuleSet
from bloom_frontier.redirectmap.apache import write_apache
from bloom_frontier.redirectmap.matching import (
    RequestKey,
    Unmatchable,
    request_key,
    server_entries,
)
from bloom_frontier.redirectmap.nginx import DEFAULT_MAX_REGEX, write_nginx
from bloom_frontier.redirectmap.semantics import SourceRow

SERVER_FORMATS = ("bulk", "nginx", "apache")


@dataclass(frozen=True)
class ServerMap:
    """What writing a map left out (a line each, saying why) and, for nginx, how many regex
    entries it wrote."""

    left_out: list[str]
    regex_count: int | None = None


def known_keys(urls: Iterable[str], rules: RuleSet = DEFAULT_RULES) -> list[RequestKey]:
    """The request keys of ``urls`` (those a server can match; the rest left out)."""
    keys = []
    for url in urls:
        with contextlib.suppress(Unmatchable):
            keys.append(request_key(url, rules))
    return keys


def write_server_map(
    rows: Iterable[SourceRow],
    fmt: str,
    out: TextIO,
    rules: RuleSet = DEFAULT_RULES,
    known_urls: Iterable[str] = (),
    max_regex: int = DEFAULT_MAX_REGEX,
) -> ServerMap:
    """Write the ``fmt`` map of the entries among ``rows`` to ``out`` (``known_urls``: the
    pages where the map is served, read by nginx only: a source with a case-only twin among
    them gets a case-sensitive entry, so that the twin is not redirected too)."""
    entries, problems = server_entries(rows, rules)
    if fmt == "bulk":
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(("source", "target", "status"))
        writer.writerows((entry.source, entry.target, entry.status) for entry in entries)
    elif fmt == "apache":
        write_apache(entries, out, rules)
    elif fmt == "nginx":
        planned = write_nginx(entries, out, known_keys(known_urls, rules), max_regex, rules)
        return ServerMap(problems + planned.left_out, planned.regex_count)
    else:
        raise ValueError(f"not a server format: {fmt!r}")
    return ServerMap(problems)
