"""Requests as JSON text, for the Redis frontier and the ``JOBDIR`` disk queues (no pickle).

Scrapy's :meth:`~scrapy.Request.to_dict` does the request-level work (callbacks and errbacks
by spider method name, the request class); this module makes the resulting dict JSON-safe,
losslessly, and :mod:`crawler.frontier.decode` reads it back (strictly: stored requests are
untrusted input). The stored object carries its format version (``"v"``).

- ``bytes`` (body, header names and values, meta values) become ``{"$b": "<base64>"}``;
- tuples become ``{"$t": [...]}``, dicts with non-string keys ``{"$m": [[key, value], ...]}``;
- a dict that happens to look like one of these tags is wrapped as ``{"$d": {...}}``.

Anything else JSON cannot hold (a lambda callback, a method of another object, an arbitrary
object or a NaN in ``meta`` / ``cb_kwargs``), or what the decoder would refuse (nested
past ``MAX_DEPTH``, larger than ``FRONTIER_MAX_REQUEST_BYTES``) raises
:class:`RequestNotSerializable` naming where it sits, when the request is *stored*, so the
worker that made it hears about it, never the one that later loads it.
"""

from __future__ import annotations

import base64
import json
import math
from typing import TYPE_CHECKING, Any

from crawler.frontier.decode import BYTES, DICT, FORMAT_VERSION, MAPPING, MAX_DEPTH, TUPLE

if TYPE_CHECKING:
    from scrapy import Request, Spider

_TAGS = frozenset({BYTES, TUPLE, MAPPING, DICT})


class RequestNotSerializable(ValueError):
    """A request that cannot be stored as JSON; ``reason`` says which part and why.

    A ``ValueError``, like the errors Scrapy's own disk queues raise, so Scrapy's scheduler
    keeps such a request in memory (counted under ``scheduler/unserializable``).
    """

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


def _encode(value: Any, where: str, depth: int = 0) -> Any:
    """``value`` as plain JSON data, tagging what JSON has no type for."""
    if depth > MAX_DEPTH:
        raise RequestNotSerializable(f"{where}: nested more than {MAX_DEPTH} levels")
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise RequestNotSerializable(f"{where}: {value!r} has no JSON form")
        return value
    if isinstance(value, (bytes, bytearray)):
        return {BYTES: base64.b64encode(value).decode("ascii")}
    if isinstance(value, tuple):
        items = [_encode(item, f"{where}[{i}]", depth + 1) for i, item in enumerate(value)]
        return {TUPLE: items}
    if isinstance(value, list):
        return [_encode(item, f"{where}[{i}]", depth + 1) for i, item in enumerate(value)]
    if isinstance(value, dict):
        if all(isinstance(key, str) for key in value):
            encoded = {
                key: _encode(item, f"{where}[{key!r}]", depth + 1) for key, item in value.items()
            }
            if len(encoded) == 1 and next(iter(encoded)) in _TAGS:
                return {DICT: encoded}
            return encoded
        return {
            MAPPING: [
                [
                    _encode(key, f"{where} key {key!r}", depth + 2),
                    _encode(item, f"{where}[{key!r}]", depth + 2),
                ]
                for key, item in value.items()
            ]
        }
    raise RequestNotSerializable(
        f"{where}: a {type(value).__module__}.{type(value).__qualname__} object is not "
        "JSON-serializable (store only str, numbers, bool, None, bytes, lists, tuples and "
        "dicts in meta and cb_kwargs)"
    )


def request_dict_to_json(request_dict: dict[str, Any], max_bytes: int | None = None) -> str:
    """A dict from :meth:`scrapy.Request.to_dict` (callbacks already named) as JSON text, at
    most ``max_bytes`` long (when given)."""
    # Header names are bytes: as a list of pairs they need no non-string-keyed mapping.
    request_dict = {**request_dict, "headers": list(request_dict["headers"].items())}
    data = {key: _encode(value, key) for key, value in request_dict.items()}
    text = json.dumps({"v": FORMAT_VERSION, **data}, separators=(",", ":"), allow_nan=False)
    if max_bytes is not None and len(text) > max_bytes:
        raise RequestNotSerializable(
            f"{len(text)} bytes as JSON, more than FRONTIER_MAX_REQUEST_BYTES ({max_bytes})"
        )
    return text


def request_to_json(
    request: Request, spider: Spider | None = None, max_bytes: int | None = None
) -> str:
    """``request`` as JSON text; :class:`RequestNotSerializable` if it has no JSON form or
    is longer than ``max_bytes``.

    Callbacks and errbacks are stored by name, so they must be methods of ``spider``.
    """
    try:
        request_dict = request.to_dict(spider=spider)
    except ValueError as exc:
        raise RequestNotSerializable(
            f"callback/errback of {request} is not a method of the spider {spider!r} ({exc}); "
            "only spider methods can be stored, they are looked up by name when loaded"
        ) from exc
    return request_dict_to_json(request_dict, max_bytes)
