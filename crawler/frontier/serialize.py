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

from scrapy import Request

from crawler.frontier.decode import BYTES, DICT, FORMAT_VERSION, MAPPING, MAX_DEPTH, TUPLE

if TYPE_CHECKING:
    from scrapy import Spider

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


class RequestShapes:
    """:meth:`Request.to_dict` for requests of a shape already seen, without its search for
    the callback's name: Scrapy's ``_find_method`` walks ``inspect.getmembers(spider)`` on
    every call, the largest cost of storing a request. The first request of each shape
    (request class, callback function, errback function) goes through ``to_dict`` itself;
    the names it found are reused for the next ones, so the dict is the one ``to_dict``
    returns.
    """

    def __init__(self, spider: Spider | None = None) -> None:
        self.spider = spider
        #: (class, callback, errback) -> the callback and errback as ``to_dict`` names them.
        self._names: dict[tuple[type, Any, Any], tuple[Any, Any]] = {}

    def to_dict(self, request: Request) -> dict[str, Any]:
        """What ``request.to_dict(spider=self.spider)`` returns (and raises)."""
        shape = (type(request), _function(request.callback), _function(request.errback))
        names = self._names.get(shape)
        if names is None:
            request_dict = request.to_dict(spider=self.spider)
            self._names[shape] = (request_dict["callback"], request_dict["errback"])
            return request_dict
        request_dict = {
            "url": request.url,
            "callback": names[0],
            "errback": names[1],
            "headers": dict(request.headers),
        }
        for attr in request.attributes:
            request_dict.setdefault(attr, getattr(request, attr))
        if type(request) is not Request:
            request_dict["_class"] = f"{type(request).__module__}.{type(request).__name__}"
        return request_dict


def _function(callback: Any) -> Any:
    """What identifies a callback for ``to_dict``: a method by its function (``to_dict``
    names it by comparing ``__func__``), anything else (None, a name) as it is."""
    return getattr(callback, "__func__", callback)


def request_to_json(
    request: Request,
    spider: Spider | None = None,
    max_bytes: int | None = None,
    *,
    shapes: RequestShapes | None = None,
    meta: dict[str, Any] | None = None,
) -> str:
    """``request`` as JSON text; :class:`RequestNotSerializable` if it has no JSON form or
    is longer than ``max_bytes``. With ``meta``, stored with that meta instead of its own
    (without a copy of the request); with ``shapes`` (made for ``spider``), its dict comes
    from there.

    Callbacks and errbacks are stored by name, so they must be methods of ``spider``.
    """
    try:
        request_dict = (
            shapes.to_dict(request) if shapes is not None else request.to_dict(spider=spider)
        )
    except ValueError as exc:
        raise RequestNotSerializable(
            f"callback/errback of {request} is not a method of the spider {spider!r} ({exc}); "
            "only spider methods can be stored, they are looked up by name when loaded"
        ) from exc
    if meta is not None:
        request_dict["meta"] = meta
    return request_dict_to_json(request_dict, max_bytes)
