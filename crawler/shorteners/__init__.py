"""Link-shortener hosts (bit.ly, t.co, ...): which links to resolve to their target.

Pure: the list is package data (``hosts.txt``, with its sources and what is excepted, such as
``youtu.be``, an identity); a crawl adds hosts with ``SHORTENER_HOSTS``. How a link is
resolved (one request, no redirect followed, cached) is
:mod:`bloom_frontier.middlewares.shorteners`.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache
from importlib.resources import files
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings


@cache
def builtin_hosts() -> frozenset[str]:
    """The shortener hosts of ``hosts.txt``.

    >>> {"bit.ly", "t.co"} <= builtin_hosts() and "youtu.be" not in builtin_hosts()
    True
    """
    text = files(__package__).joinpath("hosts.txt").read_text(encoding="utf-8")
    return frozenset(
        line.strip().lower() for line in text.splitlines() if line.strip() and line[0] != "#"
    )


class Shorteners:
    """A set of shortener hosts (each also in its ``www.`` form)."""

    def __init__(self, extra: Iterable[str] = ()) -> None:
        self.hosts = builtin_hosts() | {host.strip().lower().rstrip(".") for host in extra}

    def host_of(self, url: str) -> str | None:
        """The shortener host of ``url`` if it is a short link (a path on a shortener
        host, not its home page), else None.

        >>> Shorteners().host_of("https://WWW.Bit.ly/3abc")
        'bit.ly'
        >>> Shorteners().host_of("https://youtu.be/kJQP7kiw5Fk") is None
        True
        >>> Shorteners(["go.example"]).host_of("http://go.example/x")
        'go.example'
        >>> Shorteners().host_of("https://bit.ly/") is None
        True
        """
        try:
            parts = urlsplit(url)
        except ValueError:
            return None
        if parts.scheme not in ("http", "https") or not parts.path.strip("/"):
            return None
        host = (parts.hostname or "").rstrip(".").removeprefix("www.")
        return host if host in self.hosts else None

    def is_host(self, host: str) -> bool:
        """``host`` (any case, ``www.`` form, trailing dot) is a shortener host: its
        redirects are short links, never a site's own.

        >>> Shorteners().is_host("J.MP"), Shorteners().is_host("www.wp.me.")
        (True, True)
        >>> Shorteners().is_host("go.example"), Shorteners(["go.example"]).is_host("go.example")
        (False, True)
        """
        return host.lower().rstrip(".").removeprefix("www.") in self.hosts


def shorteners_from_settings(settings: BaseSettings) -> Shorteners:
    """The built-in shorteners plus ``SHORTENER_HOSTS``."""
    return Shorteners(settings.getlist("SHORTENER_HOSTS"))
