"""Turn an ``href`` found on a page into the URL to fetch, or ``None`` for junk.

Resolution is RFC 3986 §5.2 with the "non-strict" reading of §5.4.2 that browsers use:
``http:g`` against an ``http`` base is relative (``http://a/b/c/g``). Like the WHATWG URL
parser for http(s), backslashes before the query count as slashes and ``https:example.com``
against a base of another scheme means ``https://example.com``. The fetch URL otherwise keeps
what the site wrote (no case folding of the path, no sorting, no parameter removal); only
characters no URI may contain are percent-encoded (UTF-8) and a non-ASCII host is IDNA-encoded,
which is what Scrapy would do anyway. The fragment is dropped: it is never sent.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from functools import lru_cache

from bloom_frontier.canonical._host import HostError, normalize_host
from bloom_frontier.canonical._percent import encode_unsafe
from bloom_frontier.canonical.structural import SCHEME, clean_input, parse_port, remove_dot_segments

FETCHABLE_SCHEMES = frozenset({"http", "https"})

#: RFC 3986 Appendix B, with the scheme restricted to its real syntax (so ``a b:c`` is a path).
_REFERENCE = re.compile(
    r"(?:([A-Za-z][A-Za-z0-9+.\-]*):)?(?://([^/?#]*))?([^?#]*)(?:\?([^#]*))?", re.DOTALL
)
_PATH_END = re.compile(r"[?#]")


def _slashes_for_backslashes(href: str) -> str:
    """Browsers read ``\\`` as ``/`` in the authority and path of http(s) URLs."""
    if "\\" not in href:
        return href
    end = _PATH_END.search(href)
    cut = end.start() if end else len(href)
    return href[:cut].replace("\\", "/") + href[cut:]


def _merge(base_authority: str | None, base_path: str, path: str) -> str:
    """RFC 3986 §5.2.3: append a relative path to the base path's directory."""
    if base_authority is not None and not base_path:
        return "/" + path
    return base_path[: base_path.rfind("/") + 1] + path


@lru_cache(maxsize=1024)
def _parse_base(base_url: str) -> tuple[str | None, str | None, str, str | None]:
    """(scheme, authority, path, query) of a page URL; cached, as every link on a page shares it."""
    scheme, authority, path, query = _REFERENCE.match(
        _slashes_for_backslashes(clean_input(base_url))
    ).groups()
    return scheme and scheme.lower(), authority, path, query


@lru_cache(maxsize=1024)
def _fetchable_authority(authority: str) -> str | None:
    """The authority as written, made requestable; ``None`` if Scrapy could not request it.
    Cached: a page's relative links all have its own.

    A non-ASCII host is IDNA-encoded and an IPv6 literal normalized; no host, a bad IPv6
    literal, stray brackets or a port that is not 0..65535 make the link unusable (Scrapy's
    ``Request`` would raise). Brackets in userinfo are encoded for the same reason.
    """
    userinfo, at, hostport = authority.rpartition("@")
    if hostport[:1] == "[":
        end = hostport.find("]") + 1
        host, port = hostport[:end], hostport[end:]
        if not end or (port and port[0] != ":"):
            return None
        port = port[1:]
    else:
        host, _, port = hostport.partition(":")
        if "[" in host or "]" in host:
            return None
    if not host or (port and parse_port(port) is None):
        return None
    if host[0] == "[" or not host.isascii():
        try:
            host = normalize_host(host)
        except HostError:
            return None
    hostport = f"{host}:{port}" if port else host
    if not at:
        return hostport
    return f"{userinfo.replace('[', '%5B').replace(']', '%5D')}@{hostport}"


def _resolve(base_url: str, href: str) -> str | None:
    href = clean_input(href)
    if not href:
        return None
    scheme_match = SCHEME.match(href)
    scheme = scheme_match.group(1).lower() if scheme_match else None
    if scheme is not None and scheme not in FETCHABLE_SCHEMES:
        return None  # leave early: data: URIs can be megabytes
    href = _slashes_for_backslashes(href)
    base_scheme, base_authority, base_path, base_query = _parse_base(base_url)

    if scheme is not None:
        rest = href[len(scheme) + 1 :]
        if scheme == base_scheme and base_authority is not None and rest[:2] != "//":
            href = rest  # "http:g" is relative to an http page (RFC 3986 §5.4.2 non-strict)
        else:
            href = "//" + rest  # "https:example.com" means "https://example.com" (WHATWG)
    if href[:2] == "//":
        href = "//" + href.lstrip("/")  # "///host" is "//host" to browsers
    _, authority, path, query = _REFERENCE.match(href).groups()
    scheme = scheme or base_scheme
    if scheme not in FETCHABLE_SCHEMES:
        return None
    if authority is None:
        if base_authority is None:
            return None
        authority = base_authority
        if not path:
            path = base_path
            query = query if query is not None else base_query
        elif path[0] != "/":
            path = _merge(base_authority, base_path, path)
    fetch_authority = _fetchable_authority(authority)
    if fetch_authority is None:
        return None
    fetch_url = f"{scheme}://{fetch_authority}{remove_dot_segments(path) or '/'}"
    return encode_unsafe(fetch_url if query is None else f"{fetch_url}?{query}")


def resolve_link(base_url: str, href: str) -> str | None:
    """Absolute http(s) fetch URL for ``href`` found on ``base_url``, or ``None`` for junk.

    Junk is ``javascript:``, ``mailto:``, ``tel:``, ``data:`` and every other non-http(s)
    result, an empty or blank ``href``, and anything that cannot be resolved. Never raises.

    >>> resolve_link("http://a/b/c/d;p?q", " ../g?x#frag")
    'http://a/b/g?x'
    """
    if not isinstance(base_url, str) or not isinstance(href, str):
        return None
    try:
        return _resolve(base_url, href)
    except (ValueError, UnicodeError):
        return None


#: First characters of an ``href`` that starts a path or ``//authority``: its resolution
#: needs only the base's scheme, authority and directory (not a fragment or query alone,
#: which keep the base's own path, nor blanks, which cleaning strips).
_PATH_START = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/\\._~-%!$&'()*+,;=@"
)
#: Links one :class:`LinkResolver` remembers by default (a few hundred bytes each).
RESOLVED_LINKS = 50_000


class LinkResolver:
    """:func:`resolve_link` over many pages' links, memoized: a site's pages share most of
    their links (its navigation), and a relative link resolves alike on every page of a
    directory. Each result is remembered under exactly what it depends on: the ``href`` up
    to its ``#`` (the fragment is dropped, whatever it holds) and, for an ``href`` that
    starts a path or an authority and holds no ``:`` (so no scheme), the base's scheme,
    authority and directory; for an ``http://`` or ``https://`` link, nothing else; a
    ``#fragment`` alone resolves to the page itself, once per page. Other links (a
    ``?query`` alone, other schemes) are resolved each time. At most ``capacity`` results:
    when full, it starts afresh.
    """

    def __init__(self, capacity: int = RESOLVED_LINKS) -> None:
        self.capacity = capacity
        self._memo: dict[tuple[str | None, ...], str | None] = {}

    def resolve(self, base_url: str, hrefs: Iterable[str]) -> Iterator[str | None]:
        """``resolve_link(base_url, href)`` for each of ``hrefs``, in order."""
        if not isinstance(base_url, str):
            yield from (None for _ in hrefs)
            return
        scheme, authority, path, _ = _parse_base(base_url)
        directory = path[: path.rfind("/") + 1]
        page: str | None = None
        page_known = False
        for href in hrefs:
            if not isinstance(href, str):
                yield None
                continue
            first = href[:1]
            if first == "#":
                if not page_known:
                    page, page_known = resolve_link(base_url, "#"), True
                yield page
                continue
            cut = href.find("#") + 1
            if cut:
                href = href[:cut]  # the fragment: never sent, never changes the result
            if first in _PATH_START and ":" not in href:
                key: tuple[str | None, ...] = (scheme, authority, directory, href)
            elif first == "h" and href.startswith(("http://", "https://")):
                key = (href,)
            else:
                yield resolve_link(base_url, href)
                continue
            try:
                url = self._memo[key]
            except KeyError:
                url = resolve_link(base_url, href)
                if len(self._memo) >= self.capacity:
                    self._memo = {}
                self._memo[key] = url
            yield url
