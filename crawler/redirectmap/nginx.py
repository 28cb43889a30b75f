"""The nginx export: a file to ``include`` inside ``http {}``.

One ``map`` per redirect status (``$redirect_301``, ``$redirect_302``, ``$redirect_307``,
``$redirect_308``), every one of them defined (empty by default) whatever statuses the export
holds, so the same ``server {}`` lines work with every export; each is keyed by
``"$scheme://$host$uri$redirect_query"``: ``$uri`` is the decoded path (``%XX`` decoded,
``//`` merged, dot segments resolved), ``$redirect_query`` is empty when the query is empty
or only tracking parameters, ``?$args`` otherwise. The old site's ``server {}`` block gets one
``if`` per status (the header lines starting ``# server: ``).

String keys are matched ignoring case, so a source with a case-only twin among the crawl's
URLs becomes a case-sensitive regex entry; a source with a query also gets a regex entry
accepting its parameters in any order with tracking parameters. Regex entries are tried one
after another, so they are capped (``max_regex``); those beyond the cap are reported.
Targets cannot hold ``$`` (nginx has no escape for it): it is written as
``${redirect_dollar}``, a ``geo`` variable holding ``$``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TextIO

from bloom_frontier.canonical.rules import DEFAULT_RULES, RuleSet
from bloom_frontier.redirectmap.matching import (
    Entry,
    RequestKey,
    pcre_escape,
    query_pattern,
    tracking_only_pattern,
)

STATUSES = (301, 302, 307, 308)
MATCHED = '"$scheme://$host$uri$redirect_query"'
DEFAULT_MAX_REGEX = 1000
#: ngx_hash_elt_t: a value pointer and a length before the key, aligned to pointers.
_POINTER = 8


def quote(text: str) -> str:
    """An nginx double-quoted string (``\\`` and ``"`` escaped).

    >>> print(quote('/a "b" \\\\c'))
    "/a \\"b\\" \\\\c"
    """
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def value(target: str) -> str:
    """A map value sending to ``target``: ``$`` through the ``geo`` variable."""
    return quote(target.replace("$", "${redirect_dollar}"))


def _pow2(number: int) -> int:
    return 1 << max(0, number - 1).bit_length()


def hash_sizes(keys: Iterable[str]) -> tuple[int, int]:
    """(``map_hash_bucket_size``, ``map_hash_max_size``) that hold ``keys``: a bucket takes
    one element (pointer, length, key, aligned) and the end marker."""
    keys = list(keys)
    longest = max((len(key.encode()) for key in keys), default=0)
    element = _POINTER + (longest + 2 + _POINTER - 1) // _POINTER * _POINTER
    return max(64, _pow2(element + _POINTER)), max(2048, _pow2(2 * len(keys)))


@dataclass
class NginxMap:
    """The entries split into string keys and regex entries, per status."""

    strings: dict[int, list[tuple[str, str]]] = field(default_factory=dict)
    regexes: dict[int, list[tuple[str, str]]] = field(default_factory=dict)
    left_out: list[str] = field(default_factory=list)
    regex_count: int = 0


def _regex(key: RequestKey, rules: RuleSet) -> str:
    base = "~^" + pcre_escape(f"{key.scheme}://{key.host}{key.path}")
    if key.params:
        return base + "\\x3F" + query_pattern(key.params, rules) + "$"
    return base + "$"


def plan(
    entries: list[Entry],
    known_urls: Iterable[RequestKey] = (),
    max_regex: int = DEFAULT_MAX_REGEX,
    rules: RuleSet = DEFAULT_RULES,
) -> NginxMap:
    """Which entries are string keys and which regexes. ``known_urls`` are the crawl's
    other URLs: a source differing from one of them only in case needs a regex."""
    spellings: dict[str, set[str]] = {}
    for key in [*known_urls, *(entry.key for entry in entries)]:
        spellings.setdefault(key.text.lower(), set()).add(key.text)
    result = NginxMap()
    for entry in entries:
        text = entry.key.text
        needs_case = len(spellings[text.lower()]) > 1
        wanted = 1 if needs_case else 0
        wanted += 1 if entry.key.params else 0
        if result.regex_count + wanted > max_regex:
            if needs_case:
                result.left_out.append(
                    f"left out {entry.source}: it needs a case-sensitive regex entry and "
                    f"the cap of {max_regex} is reached"
                )
                continue
            result.left_out.append(
                f"{entry.source}: exact query order only (regex cap {max_regex} reached)"
            )
            wanted = 0
        if not needs_case:
            result.strings.setdefault(entry.status, []).append((quote(text), value(entry.target)))
        if wanted:
            result.regexes.setdefault(entry.status, []).append(
                (quote(_regex(entry.key, rules)), value(entry.target))
            )
            result.regex_count += 1
    return result


def write_nginx(
    entries: list[Entry],
    out: TextIO,
    known_urls: Iterable[RequestKey] = (),
    max_regex: int = DEFAULT_MAX_REGEX,
    rules: RuleSet = DEFAULT_RULES,
) -> NginxMap:
    """Write the nginx file for ``entries``; return the plan (what was left out)."""
    planned = plan(entries, known_urls, max_regex, rules)
    strings = [key for pairs in planned.strings.values() for key, _ in pairs]
    bucket, max_size = hash_sizes(key[1:-1] for key in strings)
    count = sum(len(pairs) for pairs in planned.strings.values())
    out.write(
        "# Redirect map generated by `scrapy redirects --format nginx`.\n"
        "# Include this file inside http {} (it defines maps and a geo variable there).\n"
        "# It needs these two directives in http {} (state them once; a second copy is an error):\n"
        f"# http: map_hash_bucket_size {bucket};\n"
        f"# http: map_hash_max_size {max_size};\n"
        "# Paste these lines into each old site's server {} block (the same for every export:\n"
        "# each variable is defined, empty when the export has no source with that status):\n"
    )
    for status in STATUSES:
        out.write(f"# server: if ($redirect_{status}) {{ return {status} $redirect_{status}; }}\n")
    out.write(
        "# Keys are matched against $scheme://$host$uri plus the query: $uri is the decoded path\n"
        "# (%XX decoded, // merged, dot segments resolved); the query is left out when it only\n"
        "# holds tracking parameters; sources with a query also match their parameters in any\n"
        "# order and with tracking parameters. String keys ignore case (nginx), so sources with\n"
        "# a case-only twin are case-sensitive regex entries. The port is not part of the key.\n"
        f"# {count} string keys, {planned.regex_count} regex entries (cap {max_regex}; "
        "regex entries are tried in order, after the string keys).\n"
        "\n"
        'geo $redirect_dollar { default "$"; }\n'
        "\n"
        "map $args $redirect_query {\n"
        '    default "?$args";\n'
        '    "" "";\n'
        f'    {quote("~" + tracking_only_pattern(rules))} "";\n'
        "}\n"
    )
    for status in STATUSES:
        out.write(f'\nmap {MATCHED} $redirect_{status} {{\n    default "";\n')
        for key, target in planned.strings.get(status, ()):
            out.write(f"    {key} {target};\n")
        for key, target in planned.regexes.get(status, ()):
            out.write(f"    {key} {target};\n")
        out.write("}\n")
    return planned
