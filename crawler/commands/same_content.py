"""``scrapy same-content``: fetched URLs with equal or near-equal content whose keys differ.

Each group is a set of pages whose content fingerprints, made under the same normalization
(``n1``, ``n2``), are equal (``exact``) or whose MinHash signatures agree on at least
``--near`` of their values (``near``, candidates found by LSH banding,
:mod:`bloom_frontier.content.lsh`), and whose dedupe keys differ: the URLs the key did not
merge though they show the same thing.
``separated_by`` names what tells their keys apart: the query parameters not shared by all
of them (``name``), and ``path`` when the paths differ too.
Only ``ok`` pages count (no errors, empty pages or soft-404s) unless ``--all-kinds``.
Formats: ``text`` (default) or ``jsonl`` (one group per line).
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from collections.abc import Iterable
from typing import Any, ClassVar, TextIO

from scrapy.commands import ScrapyCommand

from bloom_frontier.commands._failures import fails_cleanly
from bloom_frontier.commands._records import add_format_option, reading_store
from bloom_frontier.content.fingerprint import (
    NEAR_DUPLICATE,
    OK,
    similarity,
)
from bloom_frontier.content.lsh import BandIndex
from bloom_frontier.learning.evidence import split_key
from bloom_frontier.pipelines.records import write_rows


def separated_by(keys: Iterable[str]) -> list[str]:
    """What tells ``keys`` apart: parameters not shared by all (by name), ``path`` first if
    their paths differ.

    >>> separated_by(["r2|https://e.org/a?x=1", "r2|https://e.org/a?x=2&from=nav"])
    ['from', 'x']
    """
    parts = [split_key(key) or ("", key, "") for key in keys]
    param_sets = [set(query.split("&")) - {""} for _, _, query in parts]
    common = set.intersection(*param_sets) if param_sets else set()
    names = sorted({p.partition("=")[0] for params in param_sets for p in params - common})
    paths = {(host, path) for host, path, _ in parts}
    return (["path"] if len(paths) > 1 else []) + names


#: A page's content as grouped: (normalization, exact fingerprint).
Content = tuple[str, str]


def groups(
    pages: Iterable[dict[str, Any]], near: float | None = NEAR_DUPLICATE, all_kinds: bool = False
) -> list[dict[str, Any]]:
    """The groups of pages with equal (then near-equal) content and different keys."""
    by_hash: dict[Content, list[dict[str, Any]]] = defaultdict(list)
    for page in pages:
        if page["key"] and (all_kinds or page["content_kind"] == OK):
            by_hash[page["content_norm"], page["content_hash"]].append(page)
    parent = {content: content for content in by_hash}

    def root(content: Content) -> Content:
        while parent[content] != content:
            parent[content] = parent[parent[content]]
            content = parent[content]
        return content

    best: dict[Content, float] = {}
    if near is not None:
        indexes: dict[str, BandIndex[Content]] = {}  # one per normalization: never compared
        signatures: dict[Content, bytes] = {}
        for content, members in by_hash.items():
            signature = members[0]["content_minhash"]
            if signature is None:
                continue
            signatures[content] = signature
            lsh = indexes.get(content[0])
            if lsh is None:
                lsh = indexes[content[0]] = BandIndex(near)
            for other in lsh.query(signature):
                score = similarity(signature, signatures[other])
                if score >= near:
                    parent[root(content)] = root(other)
                    best[content] = max(best.get(content, 0.0), score)
            lsh.insert(content, signature)
    merged: dict[Content, list[Content]] = defaultdict(list)
    for content in by_hash:
        merged[root(content)].append(content)
    result = []
    for contents in merged.values():
        members = sorted(
            (page for content in contents for page in by_hash[content]),
            key=lambda page: page["final_url"],
        )
        keys = sorted({page["key"] for page in members})
        if len(keys) < 2:
            continue
        result.append(
            {
                "match": "exact" if len(contents) == 1 else "near",
                "similarity": 1.0
                if len(contents) == 1
                else min(best.get(c, 1.0) for c in contents),
                "urls": sorted({page["final_url"] for page in members}),
                "keys": keys,
                "separated_by": separated_by(keys),
            }
        )
    return sorted(result, key=lambda group: (-len(group["urls"]), group["urls"]))


def write_text(found: list[dict[str, Any]], out: TextIO) -> None:
    urls = sum(len(group["urls"]) for group in found)
    out.write(f"{len(found)} groups of same content under different keys ({urls} URLs)\n")
    for group in found:
        similar = "" if group["match"] == "exact" else f" {group['similarity']:.2f}"
        out.write(
            f"\n{group['match'].upper()}{similar}: {len(group['urls'])} URLs, "
            f"separated by {', '.join(group['separated_by']) or '-'}\n"
        )
        out.writelines(f"  {url}\n" for url in group["urls"])


def near_option(text: str) -> float:
    """``--near``'s value: a MinHash similarity, above 0 and at most 1.

    >>> near_option("0.8")
    0.8
    """
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value <= 1:  # NaN fails too
        raise argparse.ArgumentTypeError(f"{text!r} is not a similarity above 0 and at most 1")
    return value


class Command(ScrapyCommand):
    requires_project = True
    requires_crawler_process = False
    default_settings: ClassVar[dict[str, Any]] = {"LOG_ENABLED": False}

    def syntax(self) -> str:
        return "[--format text|jsonl] [--near SIMILARITY | --exact-only] [--all-kinds]"

    def short_desc(self) -> str:
        return "List fetched URLs with equal or near-equal content whose keys differ"

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        add_format_option(parser, ("text", "jsonl"))
        parser.add_argument(
            "--near",
            type=near_option,
            default=NEAR_DUPLICATE,
            help=f"MinHash similarity for near-equal content (default {NEAR_DUPLICATE})",
        )
        parser.add_argument("--exact-only", action="store_true", help="equal content only")
        parser.add_argument(
            "--all-kinds", action="store_true", help="include errors, empty pages, soft-404s"
        )

    @fails_cleanly
    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        assert self.settings is not None
        with reading_store(self.settings) as store:
            found = groups(
                store.fingerprinted_pages(),
                near=None if opts.exact_only else opts.near,
                all_kinds=opts.all_kinds,
            )
        if opts.format == "jsonl":
            write_rows(found, "jsonl", (), sys.stdout)
        else:
            write_text(found, sys.stdout)
