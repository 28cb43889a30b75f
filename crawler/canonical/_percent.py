"""Percent-encoding helpers (RFC 3986 §2.1, §2.4, §6.2.2.2) as precompiled regex substitutions.

Encoding is always UTF-8; a lone surrogate cannot be encoded and raises ``UnicodeEncodeError``
for the caller to turn into its own error.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import partial

UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_HEX_UPPER = tuple(f"%{byte:02X}" for byte in range(256))
#: Every ``%XX`` spelling (either case) to its normal form: the octet's character if it is
#: unreserved, else the escape in uppercase hex; a ``%`` starting no escape to ``%25``.
_HEX = "0123456789ABCDEFabcdef"
_ESCAPES = {"%": "%25"} | {
    f"%{high}{low}": char
    if (char := chr(int(high + low, 16))) in UNRESERVED
    else f"%{high}{low}".upper()
    for high in _HEX
    for low in _HEX
}


_SUB_DELIMS_BUT_QUOTE = r"!$&()*+,;="
_USERINFO_SAFE = r"A-Za-z0-9\-._~'" + _SUB_DELIMS_BUT_QUOTE + ":"
PATH_SAFE = _USERINFO_SAFE + "@/"
#: ``'`` is a sub-delim, but browsers and Scrapy (w3lib) send it as ``%27`` in a query, so the
#: two spellings are the same request.
QUERY_SAFE = r"A-Za-z0-9\-._~" + _SUB_DELIMS_BUT_QUOTE + ":@/?"
#: Everything RFC 3986 allows anywhere in a URI (unreserved, reserved, and ``%``).
_URI_SAFE = PATH_SAFE + r"?#\[\]%"


def percent_encode(text: str) -> str:
    """``é`` -> ``%C3%A9``: the UTF-8 octets of ``text``, uppercase hex."""
    return "".join([_HEX_UPPER[byte] for byte in text.encode("utf-8")])


def _normalize_match(match: re.Match[str]) -> str:
    text = match.group()
    return _ESCAPES.get(text) or percent_encode(text)


def _normalizer(safe: str) -> Callable[[str], str]:
    """Build ``text -> normalized text`` for a component whose raw-allowed set is ``safe``.

    Escapes of unreserved octets are decoded, other escapes get uppercase hex, a ``%`` not
    starting an escape becomes ``%25`` and every other disallowed character is encoded.
    """
    return partial(re.compile(rf"%[0-9A-Fa-f]{{2}}|%|[^{safe}%]+").sub, _normalize_match)


normalize_userinfo = _normalizer(_USERINFO_SAFE)
normalize_path = _normalizer(PATH_SAFE)
normalize_query = _normalizer(QUERY_SAFE)

_UNSAFE = re.compile(rf"%(?![0-9A-Fa-f]{{2}})|[^{_URI_SAFE}]+")
#: Nothing to encode and no ``%`` to check: one character-class scan, 3x faster than ``_UNSAFE``.
_NOTHING_TO_ENCODE = re.compile(rf"[{_URI_SAFE.replace('%', '')}]*")


def encode_unsafe(text: str) -> str:
    """Encode only what no URI may contain (spaces, non-ASCII, ``"<>^`{|}``, stray ``%``).

    Valid escapes and reserved characters are left exactly as written.
    """
    if _NOTHING_TO_ENCODE.fullmatch(text):
        return text
    return _UNSAFE.sub(lambda match: percent_encode(match.group()), text)
