"""How a web server recognizes a map entry's source, shared by the nginx and Apache writers.

Servers match the *decoded* path (nginx ``$uri``, Apache's RewriteRule URL-path: ``%XX``
decoded, ``//`` merged) and the raw query. A source is keyed by scheme, host (no port), that
decoded path, and the query parameters its dedupe key keeps, in the source's order. Requests
that differ from a source only in parameter order or by tracking parameters are the same page
to the crawl, so the server patterns accept them (:func:`query_pattern`).

Regular expressions are written for PCRE with every ASCII character that is not a letter or
digit as ``\\xHH``: no quote, space, ``$``, brace or backslash a config parser could read.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import unquote_to_bytes, urlsplit

from bloom_frontier.canonical.rules import DEFAULT_RULES, RuleSet
from bloom_frontier.redirectmap.semantics import SourceRow, without_dropped_params

_SLASHES = re.compile("//+")


class Unmatchable(ValueError):
    """A source no server pattern can express (the reason is the message)."""


@dataclass(frozen=True)
class RequestKey:
    """What a server sees of a request for a source."""

    scheme: str
    host: str
    path: str  # decoded, slashes merged
    params: tuple[str, ...]  # raw ``name=value`` the dedupe key keeps, in order

    @property
    def text(self) -> str:
        """``scheme://host/path[?query]``: the string nginx's map key is built as."""
        query = "&".join(self.params)
        return f"{self.scheme}://{self.host}{self.path}" + (f"?{query}" if query else "")

    @property
    def page(self) -> tuple[str, str, str, tuple[str, ...]]:
        """The same for every parameter order: the variants of one page share it."""
        return self.scheme, self.host, self.path, tuple(sorted(self.params))


def request_key(url: str, rules: RuleSet = DEFAULT_RULES) -> RequestKey:
    """The :class:`RequestKey` of ``url``; :class:`Unmatchable` when its decoded path is not
    UTF-8 or holds control characters.

    >>> request_key("https://E.org/a%20b//c?utm_source=x&q=%24").text
    'https://e.org/a b/c?q=%24'
    """
    parts = urlsplit(without_dropped_params(url, rules))
    try:
        path = unquote_to_bytes(parts.path or "/").decode("utf-8")
    except UnicodeDecodeError:
        raise Unmatchable("decoded path is not UTF-8") from None
    if any(ord(char) < 0x20 or ord(char) == 0x7F for char in path):
        raise Unmatchable("decoded path holds control characters")
    host = (parts.hostname or "").rstrip(".")
    if ":" in host:  # an IPv6 literal: servers see it in brackets
        host = f"[{host}]"
    params = tuple(param for param in parts.query.split("&") if param)
    return RequestKey(parts.scheme, host, _SLASHES.sub("/", path), params)


def pcre_escape(text: str) -> str:
    """``text`` as a PCRE literal: ASCII letters, digits and non-ASCII as they are, every
    other character as ``\\xHH``.

    >>> pcre_escape('/a b$"c.d')
    '\\\\x2Fa\\\\x20b\\\\x24\\\\x22c\\\\x2Ed'
    """
    return "".join(
        char if char.isalnum() or char in "_-" or not char.isascii() else f"\\x{ord(char):02X}"
        for char in text
    )


def dropped_param_pattern(rules: RuleSet = DEFAULT_RULES) -> str:
    """A PCRE for one query parameter every host's key drops (tracking, session ids)."""
    names = sorted(rules.tracking | rules.session_params)
    prefixes = sorted(rules.tracking_prefixes + rules.session_prefixes)
    alternatives = [pcre_escape(name) for name in names]
    alternatives += [pcre_escape(prefix) + "[^=&]*" for prefix in prefixes]
    return "(?i:" + "|".join(alternatives) + ")(?:=[^&]*)?"


def tracking_only_pattern(rules: RuleSet = DEFAULT_RULES) -> str:
    """A PCRE for a query made of dropped parameters alone (empty included)."""
    dropped = dropped_param_pattern(rules)
    return f"^(?:{dropped})?(?:&(?:{dropped})?)*$"


def query_pattern(params: Iterable[str], rules: RuleSet = DEFAULT_RULES) -> str:
    """A PCRE for a query holding every one of ``params`` in any order, with dropped
    parameters anywhere, and nothing else (no anchors)."""
    params = list(dict.fromkeys(params))
    escaped = [pcre_escape(param) for param in params]
    required = "".join(f"(?=(?:[^&]*&)*{param}(?:&|$))" for param in escaped)
    allowed = "|".join([*escaped, dropped_param_pattern(rules)])
    return f"{required}(?:{allowed})(?:&(?:{allowed}))*"


@dataclass(frozen=True)
class Entry:
    """One thing to write into a server map."""

    key: RequestKey
    target: str
    status: int
    source: str


def server_entries(
    rows: Iterable[SourceRow], rules: RuleSet = DEFAULT_RULES
) -> tuple[list[Entry], list[str]]:
    """The map entries of ``rows`` as servers match them, and what was left out and why.

    Sources that are variants of one page (parameter order, tracking parameters, scheme and
    host spelling) collapse into one entry; variants sending to different targets keep the
    one with the fewest hops and are reported. An entry whose target a server would match as
    the entry itself (it would redirect to itself) is left out.
    """
    chosen: dict[tuple[str, str, str, tuple[str, ...]], tuple[SourceRow, RequestKey]] = {}
    problems: list[str] = []
    for row in rows:
        if not row.entry or row.target is None:
            continue
        try:
            key = request_key(row.source, rules)
        except Unmatchable as exc:
            problems.append(f"left out {row.source}: {exc}")
            continue
        try:
            if request_key(row.target, rules).page == key.page:
                problems.append(f"left out {row.source}: a server would redirect it to itself")
                continue
        except Unmatchable:
            pass
        held = chosen.get(key.page)
        if held is None:
            chosen[key.page] = (row, key)
            continue
        if (held[0].target, held[0].status) != (row.target, row.status):
            keep, drop = (held[0], row) if held[0].hops <= row.hops else (row, held[0])
            problems.append(
                f"{drop.source} and {keep.source} are one page with different targets: "
                f"kept {keep.target} ({keep.status})"
            )
            if keep is row:
                chosen[key.page] = (row, key)
    entries = [
        Entry(key, row.target, row.status, row.source) for row, key in chosen.values() if row.target
    ]
    return entries, problems
