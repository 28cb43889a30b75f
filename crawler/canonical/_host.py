"""Host normalization shared by :func:`canonicalize` and :func:`resolve_link`.

Follows the WHATWG URL Standard's host parser (percent-decode, UTS #46 ToASCII with the
``idna`` package's tables, forbidden code points, IPv4 in every legacy spelling, bracketed
IPv6) and adds the DNS length limits that WHATWG leaves off (a host no resolver accepts cannot
be fetched, so it gets no key). Results are cached: hosts repeat far more than URLs do.
"""

from __future__ import annotations

import ipaddress
import re
from functools import lru_cache
from urllib.parse import unquote_to_bytes

import idna

#: WHATWG "forbidden domain code point": forbidden host code points, C0 controls, % and DEL.
_FORBIDDEN_DOMAIN = re.compile(r"[\x00-\x20#%/:<>?@\[\\\]^|\x7f]")
_DECIMAL = re.compile(r"[0-9]+")
_OCTAL = re.compile(r"[0-7]*")
_HEX = re.compile(r"[0-9A-Fa-f]*")
_JOINERS = ("\u200c", "\u200d")
_OUT_OF_RANGE = 1 << 64
MAX_LABEL_LENGTH = 63
MAX_HOST_LENGTH = 253


class HostError(ValueError):
    """A host that cannot be normalized; the message says why."""


def _ipv4_number(part: str) -> int | None:
    """Parse one dotted part the WHATWG way: ``0x`` hex, leading-zero octal, else decimal."""
    if part[:2] in ("0x", "0X"):
        digits, pattern, radix = part[2:], _HEX, 16
    elif len(part) > 1 and part[0] == "0":
        digits, pattern, radix = part[1:], _OCTAL, 8
    else:
        digits, pattern, radix = part, _DECIMAL, 10
    if not pattern.fullmatch(digits):
        return None
    if len(digits.lstrip("0")) > 12:  # over 2**32 in any radix; int() refuses >4300 digits
        return _OUT_OF_RANGE
    return int(digits, radix) if digits else 0


def _ends_in_number(host: str) -> bool:
    """WHATWG "ends in a number": the last non-empty label decides whether this is IPv4."""
    parts = host.split(".")
    if parts[-1] == "":
        if len(parts) == 1:
            return False
        parts.pop()
    last = parts[-1]
    return bool(last) and ((last.isascii() and last.isdigit()) or _ipv4_number(last) is not None)


def _parse_ipv4(host: str) -> str:
    """WHATWG IPv4 parser: ``2130706433``, ``0x7f.1`` and ``0177.0.0.1`` all mean 127.0.0.1."""
    parts = host.split(".")
    if parts[-1] == "" and len(parts) > 1:
        parts.pop()
    if len(parts) > 4 or "" in parts:
        raise HostError("malformed IPv4 address")
    numbers: list[int] = []
    for part in parts:
        number = _ipv4_number(part)
        if number is None:
            raise HostError("malformed IPv4 address")
        numbers.append(number)
    *leading, last = numbers
    if any(number > 255 for number in leading) or last >= 256 ** (5 - len(numbers)):
        raise HostError("IPv4 address out of range")
    value = last + sum(number * 256 ** (3 - index) for index, number in enumerate(leading))
    return str(ipaddress.IPv4Address(value))


def _parse_ipv6(literal: str) -> str:
    """Bracketed IPv6 in compressed lowercase form; zone ids and IPvFuture are refused."""
    inner = literal[1:-1]
    if not inner.isascii() or "%" in inner:
        raise HostError("IPv6 zone ids and non-ASCII are not allowed")
    try:
        return f"[{ipaddress.IPv6Address(inner).compressed}]"
    except ValueError as error:
        raise HostError(f"bad IPv6 address: {error}") from None


def _decode_punycode(label: str) -> str:
    """The Unicode behind an ``xn--`` label; invalid Punycode can never match a registered name."""
    try:
        decoded = label[4:].encode("ascii").decode("punycode")
    except (UnicodeError, ValueError, IndexError):
        raise HostError(f"invalid Punycode label {label!r}") from None
    if not decoded:
        raise HostError(f"empty Punycode label {label!r}")
    return decoded


def _check_uts46_label(label: str) -> None:
    """UTS #46 validity criteria with WHATWG's flags (CheckHyphens off, joiners and bidi on)."""
    try:
        idna.check_nfc(label)
        idna.check_initial_combiner(label)
        joiners_ok = all(
            idna.valid_contextj(label, position)
            for position, char in enumerate(label)
            if char in _JOINERS
        )
        idna.check_bidi(label)
    except (idna.IDNAError, UnicodeError, ValueError) as error:
        raise HostError(f"label {label!r}: {error}") from None
    if not joiners_ok:
        raise HostError(f"label {label!r}: joiner not allowed here")


def _uts46_map(text: str) -> str:
    """UTS #46 mapping (case folding, width, ignored code points); disallowed ones fail."""
    try:
        return idna.uts46_remap(text, std3_rules=False)
    except (idna.IDNAError, UnicodeError, ValueError) as error:
        raise HostError(f"UTS #46 mapping failed: {error}") from None


def _uts46_label_to_ascii(label: str) -> str:
    """One label after UTS #46 mapping -> its ASCII form, validating what UTS #46 validates."""
    if label.isascii():
        if label[:4] != "xn--":
            return label
        decoded = _decode_punycode(label)
        if decoded.isascii() or _uts46_map(decoded) != decoded:
            raise HostError(f"Punycode label {label!r} decodes to a label UTS #46 rejects")
        _check_uts46_label(decoded)
        return label
    if label[:4] == "xn--":
        raise HostError(f"non-ASCII label with an xn-- prefix {label!r}")
    _check_uts46_label(label)
    return "xn--" + label.encode("punycode").decode("ascii")


def _domain_to_ascii(domain: str) -> str:
    """WHATWG domain to ASCII: ASCII domains are only lowercased, others go through UTS #46.

    Unlike WHATWG, an ``xn--`` label of an ASCII domain must at least be valid Punycode.
    """
    if domain.isascii():
        ascii_domain = domain.lower()
        for label in ascii_domain.split("."):
            if label[:4] == "xn--":
                _decode_punycode(label)
        return ascii_domain
    return ".".join(_uts46_label_to_ascii(label) for label in _uts46_map(domain).split("."))


def _check_dns_lengths(domain: str) -> None:
    """Labels of 1..63 octets and at most 253 in all (a trailing root dot is allowed)."""
    name = domain[:-1] if domain.endswith(".") else domain
    if len(name) > MAX_HOST_LENGTH:
        raise HostError("host longer than 253 characters")
    for label in name.split("."):
        if not 0 < len(label) <= MAX_LABEL_LENGTH:
            raise HostError("empty label or label longer than 63 characters")


def normalize_host(host: str) -> str:
    """Return the canonical spelling of ``host`` (as found between ``//``/``@`` and ``:port``).

    Raises :class:`HostError` when the host is empty, contains forbidden code points, fails
    UTS #46, is a malformed IP literal or breaks DNS length limits.
    """
    result = _host_or_refusal(host)
    if type(result) is _Refusal:
        raise HostError(str(result))
    return result


class _Refusal(str):
    """Why a host was refused: cached like a result, raised afresh as a :class:`HostError`."""


@lru_cache(maxsize=65536)
def _host_or_refusal(host: str) -> str:
    """:func:`_normalize_host`, cached both ways: a refused host (a page repeating a bad
    link, a site with a broken host everywhere) costs its UTS #46 work once, like a good one."""
    try:
        return _normalize_host(host)
    except HostError as error:
        return _Refusal(error)


def _normalize_host(host: str) -> str:
    """The uncached work of :func:`normalize_host`."""
    if not host:
        raise HostError("empty host")
    if host[0] == "[":
        if host[-1] != "]":
            raise HostError("unterminated IPv6 literal")
        return _parse_ipv6(host)
    if "%" in host:
        try:
            host = unquote_to_bytes(host).decode("utf-8")
        except UnicodeDecodeError:
            raise HostError("percent-escapes in host are not UTF-8") from None
    host = _domain_to_ascii(host)
    if not host or _FORBIDDEN_DOMAIN.search(host):
        raise HostError("empty host or forbidden code point in host")
    if _ends_in_number(host):
        return _parse_ipv4(host)
    _check_dns_lengths(host)
    return host


__all__ = ["HostError", "normalize_host"]
