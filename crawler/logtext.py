"""URLs, keys and requests in log lines, cut to a readable length.

A URL can be as long as ``FRONTIER_MAX_REQUEST_BYTES`` lets a stored request be (megabytes);
logged whole, once per message, it floods the log. Every log message of the frontier and
the middlewares that carries a URL, a key or a request passes it through :func:`short`.
"""

from __future__ import annotations

#: The most characters of one URL, key or request a log line carries.
MAX_LOGGED = 300


def short(value: object, limit: int = MAX_LOGGED) -> str:
    """``value`` (a URL, a key, a request: its ``str``) at most about ``limit`` characters
    long, saying how much was cut.

    >>> short("https://example.com/" + "a" * 1000, 40)
    'https://example.com/aaaaaaaaaaaaaaaaaaaa... (+980 chars)'
    >>> short("https://example.com/")
    'https://example.com/'
    """
    text = value if isinstance(value, str) else str(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... (+{len(text) - limit} chars)"
