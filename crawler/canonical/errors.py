"""The one exception canonicalization raises."""

from __future__ import annotations


class InvalidURL(ValueError):
    """A URL that cannot be given a trustworthy key.

    ``reason`` is machine-readable (``bad-host``, ``bad-port``, ``unsupported-scheme``,
    ``too-long``, ...) so that callers can count rejections by kind.
    """

    def __init__(self, reason: str, url: str, detail: str = "") -> None:
        self.reason = reason
        self.url = url
        self.detail = detail
        message = f"{reason}: {url[:200]!r}"
        super().__init__(f"{message} ({detail})" if detail else message)
