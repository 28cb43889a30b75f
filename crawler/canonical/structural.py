"""Stage 1: structural, provider-agnostic normalization (RFC 3986 §6.2.2-6.2.3).

:func:`canonicalize` only applies rewrites that never change which resource a URL names for
any HTTP server, plus two documented policy choices (query parameters sorted stably by key;
a bare ``?`` dropped). Anything it cannot vouch for raises :class:`InvalidURL`.

Rules, in order:

* surrounding C0 controls/spaces stripped, tab/CR/LF removed (as browsers do); fragment dropped;
* at most :data:`MAX_URL_LENGTH` characters (without fragment), else ``too-long``;
* scheme lowercased, only ``http``/``https`` (``unsupported-scheme``); ``//authority``
  required (``not-absolute``);
* host per WHATWG: percent-decoded, UTS #46 ToASCII via ``idna``, IPv4 in any legacy
  spelling -> dotted quad, IPv6 compressed, plus DNS length limits (``bad-host``);
* port digits only, 0..65535 (``bad-port``); empty and default ports removed;
* userinfo kept (empty user and password dropped, ``:`` inside the password encoded);
* percent-escapes: unreserved octets decoded, hex uppercased, stray ``%`` -> ``%25``, characters
  not allowed raw in the component encoded as UTF-8; reserved escapes (``%2F``...) kept; a raw
  ``'`` in the query becomes ``%27``, which is what browsers and Scrapy send for it;
* dot-segments removed (RFC 3986 §5.2.4), empty path -> ``/``;
* query split on ``&``, empty parameters dropped, parameters sorted stably by key (repeated
  keys keep their order; ``a`` and ``a=`` stay distinct; ``+`` untouched); an empty query
  loses its ``?`` (RFC 3986 §6.2.3 calls ``/?`` and ``/`` different, but no server we know
  serves different content, and crawl keys should not split on it).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from operator import itemgetter

from bloom_frontier.canonical._host import HostError, normalize_host
from bloom_frontier.canonical._percent import (
    PATH_SAFE,
    QUERY_SAFE,
    normalize_path,
    normalize_query,
    normalize_userinfo,
)
from bloom_frontier.canonical.errors import InvalidURL

#: Longest accepted URL (without its fragment), before and after normalization: 8 KiB, the
#: request-line limit of common servers (nginx, Apache); longer URLs rarely fetch anyway.
MAX_URL_LENGTH = 8192
DEFAULT_PORTS = {"http": "80", "https": "443"}

_STRIP = "".join(map(chr, range(0x21)))
_TAB_NEWLINE = str.maketrans("", "", "\t\n\r")
SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*):")
_AUTHORITY_END = re.compile(r"[/?]")
#: A parameter's ``=value``: removing every one leaves the names (a value's own ``=`` included).
_VALUES = re.compile(r"=[^&]*")
#: Name sequences whose reordering :func:`sort_query` remembers (emptied when full).
ORDER_CACHE_SIZE = 20_000
_ORDERS: dict[str, Callable[[list[str]], tuple[str, ...]] | None] = {}
#: An already clean URL (lowercase scheme, no userinfo, nothing to percent-encode in path and
#: query) skips cleaning and parsing: the common case, fast. Its host is what the general path
#: would take (no character that cleaning removes or that ends or splits an authority; no
#: lone surrogate) and goes to the same host parser, IDNA and escapes included.
#: Groups: origin (``scheme://host[:port]`` as written), scheme, host, port, path, query.
#: Every repetition is possessive (``*+``): the character ending it is never one it takes, so
#: giving some back cannot lead to a match, and a URL that is not clean fails at once instead
#: of backtracking through its path and query (3 µs for a query with one non-ASCII letter).
CLEAN_URL = re.compile(
    r"((https?)://([^\x00-\x20/?#@:\[\]\\\ud800-\udfff]++)(?::([0-9]*+))?)"
    rf"(/[{PATH_SAFE}%]*+)?(?:\?([{QUERY_SAFE}%]*+))?(?:#.*)?",
    re.DOTALL,
)
#: :data:`CLEAN_URL`'s origin, with a path and query that may need encoding (non-ASCII, ``"``,
#: ``<>``...): what the general path would do to them is only their encoding, as long as they
#: hold no character cleaning removes or strips (C0 controls, space) and no lone surrogate
#: (which cannot be encoded). Same groups; tried only when :data:`CLEAN_URL` fails.
ENCODABLE_URL = re.compile(
    r"((https?)://([^\x00-\x20/?#@:\[\]\\\ud800-\udfff]++)(?::([0-9]*+))?)"
    r"(/[^?#\x00-\x20\ud800-\udfff]*+)?(?:\?([^#\x00-\x20\ud800-\udfff]*+))?(?:#.*)?",
    re.DOTALL,
)


def clean_input(url: str) -> str:
    """Strip C0 controls and spaces around ``url`` and drop tabs/newlines inside, like browsers."""
    url = url.strip(_STRIP)
    if "\t" in url or "\n" in url or "\r" in url:
        url = url.translate(_TAB_NEWLINE)
    return url


def _without_fragment(url: str) -> str:
    """The URL an error names: as the general path reads it, without its fragment (a fast
    path's match still has it)."""
    return url.partition("#")[0]


def remove_dot_segments(path: str) -> str:
    """RFC 3986 §5.2.4: resolve ``.`` and ``..`` segments (``/a/./b/../c`` -> ``/a/c``).

    An absolute path stays absolute (``/..`` -> ``/``); ``..`` never climbs above the root.
    """
    if "/." not in path and path[:1] != ".":
        return path
    absolute = path[:1] == "/"
    segments = (path[1:] if absolute else path).split("/")
    output: list[str] = []
    for segment in segments:
        if segment == "..":
            if output:
                output.pop()
        elif segment != ".":
            output.append(segment)
    if segments[-1] in (".", ".."):
        output.append("")  # "/a/b/.." names the directory "/a/"
    return "/" + "/".join(output) if absolute else "/".join(output)


def parse_port(port: str) -> int | None:
    """``"0080"`` -> 80; ``None`` unless ``port`` is ASCII digits meaning 0..65535."""
    if port.isascii() and port.isdigit() and len(port.lstrip("0")) <= 5:  # int() caps digits
        number = int(port)
        if number <= 65535:
            return number
    return None


def _host_port(host: str, port: str | None, scheme: str, url: str) -> str:
    """Canonical ``host[:port]``: host via the cached WHATWG parser, default/empty port dropped."""
    try:
        host = normalize_host(host)
    except HostError as error:
        raise InvalidURL("bad-host", _without_fragment(url), str(error)) from None
    if not port:
        return host
    number = parse_port(port)
    if number is None:
        raise InvalidURL("bad-port", _without_fragment(url), f"port {port[:20]!r}")
    port = str(number)
    return host if port == DEFAULT_PORTS[scheme] else f"{host}:{port}"


def _normalize_authority(authority: str, scheme: str, url: str) -> str:
    userinfo, at, hostport = authority.rpartition("@")
    if hostport.startswith("["):
        end = hostport.find("]") + 1
        host, port = hostport[:end], hostport[end:]
        if not end or (port and port[0] != ":"):
            raise InvalidURL("bad-host", url, "malformed IPv6 literal")
        port = port[1:]
    else:
        host, _, port = hostport.partition(":")
    host = _host_port(host, port, scheme, url)
    if at:
        user, _, password = normalize_userinfo(userinfo).partition(":")
        if password:  # only the first ":" separates; the password's own are data (as WHATWG)
            return f"{user}:{password.replace(':', '%3A')}@{host}"
        if user:
            return f"{user}@{host}"
    return host


def _split_any(url: str) -> tuple[str, str, str, str]:
    """General path: clean, parse and percent-normalize; query parameters not yet sorted."""
    url = clean_input(url)
    hash_index = url.find("#")
    if hash_index >= 0:
        url = url[:hash_index]
    if len(url) > MAX_URL_LENGTH:
        raise InvalidURL("too-long", url, f"more than {MAX_URL_LENGTH} characters")
    match = SCHEME.match(url)
    if match is None:
        raise InvalidURL("not-absolute", url, "no scheme")
    scheme = match.group(1).lower()
    if scheme not in DEFAULT_PORTS:
        raise InvalidURL("unsupported-scheme", url, scheme)
    start = match.end()
    if url[start : start + 2] != "//":
        raise InvalidURL("not-absolute", url, "no //authority")
    start += 2
    authority_end = _AUTHORITY_END.search(url, start)
    end = authority_end.start() if authority_end else len(url)
    path, _, query = url[end:].partition("?")
    try:
        authority = _normalize_authority(url[start:end], scheme, url)
        return scheme, authority, normalize_path(path) or "/", normalize_query(query)
    except UnicodeEncodeError:
        raise InvalidURL("bad-url", url, "lone surrogate") from None


def _query_order(names: str) -> Callable[[list[str]], tuple[str, ...]] | None:
    """How to sort parameters named ``names`` (``&``-joined, two or more) stably by name: an
    ``itemgetter`` of the split parameters, or None if they are in order already."""
    keys = names.split("&")
    if keys == sorted(keys):
        return None
    return itemgetter(*sorted(range(len(keys)), key=keys.__getitem__))  # sorted() is stable


def sort_query(query: str) -> tuple[str, str]:
    """Drop empty parameters and sort the rest stably by key (repeated keys keep their order);
    with the parameters' names, ``&``-joined in their original order (what the dedupe key's
    rules look at first).

    The order depends on the names alone, which repeat far more than queries do, so it is
    computed once per name sequence (a bounded cache) and applied with one ``itemgetter``.
    """
    params = query.split("&")
    if "" in params:
        params = [param for param in params if param]
        query = "&".join(params)
    if len(params) < 2:
        return query, query.partition("=")[0]
    names = _VALUES.sub("", query)
    try:
        order = _ORDERS[names]
    except KeyError:
        if len(_ORDERS) >= ORDER_CACHE_SIZE:
            _ORDERS.clear()
        order = _ORDERS[names] = _query_order(names)
    return (query if order is None else "&".join(order(params))), names


def clean_path_query(
    path: str | None, query: str | None, encode: bool = False
) -> tuple[str, str | None, str]:
    """Stage-1 path and query of a :data:`CLEAN_URL` match (its last two groups), or with
    ``encode`` of an :data:`ENCODABLE_URL` match, and the query's parameter names
    (:func:`sort_query`; "" for none).

    The part of :func:`canonicalize` after the authority, shared with the dedupe key's fast
    path so that both give the same form by construction.
    """
    if not path:
        path = "/"
    else:
        if encode or "%" in path:
            path = normalize_path(path)
        if "/." in path:
            path = remove_dot_segments(path)
    if not query:
        return path, query, ""
    if encode or "%" in query:
        query = normalize_query(query)
    query, names = sort_query(query)
    return path, query, names


def canonicalize(url: str) -> str:
    """Return the stage-1 canonical form of an absolute http(s) URL.

    >>> canonicalize("HTTP://Example.COM:80/a/./b/../%7euser?b=2&a=1#top")
    'http://example.com/a/~user?a=1&b=2'

    Raises :class:`InvalidURL` (``reason`` = ``bad-host``, ``bad-port``, ``unsupported-scheme``,
    ``too-long``, ``not-absolute``, ``bad-url``). Idempotent.
    """
    if not isinstance(url, str):
        raise InvalidURL("bad-url", repr(url), "not a string")
    clean, encode = None, False
    if len(url) <= MAX_URL_LENGTH:
        clean = CLEAN_URL.fullmatch(url)
        if encode := clean is None:
            clean = ENCODABLE_URL.fullmatch(url)
    if clean is None:
        scheme, authority, path, query = _split_any(url)
        if "/." in path:
            path = remove_dot_segments(path)
        if query and "&" in query:
            query = sort_query(query)[0]
    else:  # fast path: only escapes and what needs encoding may change
        _, scheme, host, port, path, query = clean.groups()
        authority = _host_port(host, port, scheme, url)
        path, query, _ = clean_path_query(path, query, encode)
    result = f"{scheme}://{authority}{path}?{query}" if query else f"{scheme}://{authority}{path}"
    if len(result) > MAX_URL_LENGTH:
        raise InvalidURL(
            "too-long",
            _without_fragment(url),
            f"more than {MAX_URL_LENGTH} characters once encoded",
        )
    return result
