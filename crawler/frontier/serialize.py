"""Requests as text, for the Redis frontier and the ``JOBDIR`` disk queues (no pickle).

Scrapy's :meth:`~scrapy.Request.to_dict` does the request-level work (callbacks and errbacks
by spider method name, the request class); this module makes the resulting dict JSON-safe,
losslessly, and :mod:`bloom_frontier.frontier.decode` reads it back (strictly: stored requests are
untrusted input). Two forms:

- a JSON object carrying its format version (``"v"``): the ``JOBDIR`` disk queues,
  failure records (:func:`request_to_json`);
- the shared frontier's compact record (format 2) (:func:`compact_record`): the URL once, the
  fields a call site shares (callback, errback, flags, method, class...) by reference to an
  entry of the crawl's table of request shapes, and only the other fields that are not
  Scrapy's defaults: ``2<TAB><shape id><TAB><url>[<TAB><JSON object of those fields>]``.
  A ``meta`` value that is the URL itself behind a short prefix (the dedupe key
  ``r2|<url>``, the checked mark) or the request's politeness host is named in the shape,
  not stored. Redis' scripts give a shape its id (``shapes``, append-only, see
  :mod:`bloom_frontier.frontier.redis.layout`).

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

from bloom_frontier.frontier.decode import (
    BYTES,
    DICT,
    FORMAT_VERSION,
    MAPPING,
    MAX_DEPTH,
    MAX_URL_META_PREFIX,
    SHAPE_FIELDS,
    TUPLE,
)

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
    text = _dumps({"v": FORMAT_VERSION, **_json_safe(request_dict)})
    _check_size(len(text), max_bytes)
    return text


def _json_safe(request_dict: dict[str, Any]) -> dict[str, Any]:
    # Header names are bytes: as a list of pairs they need no non-string-keyed mapping.
    if "headers" in request_dict:
        request_dict = {**request_dict, "headers": list(request_dict["headers"].items())}
    return {key: _encode(value, key) for key, value in request_dict.items()}


def _dumps(data: dict[str, Any], *, sort_keys: bool = False) -> str:
    return json.dumps(data, separators=(",", ":"), allow_nan=False, sort_keys=sort_keys)


def _check_size(size: int, max_bytes: int | None) -> None:
    if max_bytes is not None and size > max_bytes:
        raise RequestNotSerializable(
            f"{size} bytes as stored, more than FRONTIER_MAX_REQUEST_BYTES ({max_bytes})"
        )


#: Scrapy's defaults of the fields a compact record leaves out when they have them.
DEFAULTS: dict[str, Any] = {
    "callback": None,
    "errback": None,
    "headers": {},
    "body": b"",
    "cookies": {},
    "meta": {},
    "encoding": "utf-8",
    "flags": [],
    "cb_kwargs": {},
    "dont_filter": False,
    "method": "GET",
    "priority": 0,
}
_MISSING = object()


def compact_record(
    request: Request,
    spider: Spider | None = None,
    max_bytes: int | None = None,
    *,
    host: str = "",
    host_meta: str | None = None,
    shapes: RequestShapes | None = None,
    meta: dict[str, Any] | None = None,
) -> tuple[str, str]:
    """``request`` as the shared frontier stores it: its shape (JSON, sorted keys: one text
    per shape) and the rest of its format-2 record, ``<url>[<TAB><JSON fields>]``; the
    Redis script puts ``2<TAB><shape id><TAB>`` in front. ``meta[host_meta]``, when it is
    ``host`` (the request's politeness host, which its lane names), is left to the shape.
    A URL with a tab (Scrapy escapes them: never seen) is stored as a JSON object, as
    ``("", JSON)``. ``shapes`` and ``meta`` as for :func:`request_to_json`. Raises
    :class:`RequestNotSerializable` as :func:`request_to_json`."""
    request_dict = _to_dict(request, spider, shapes)
    if meta is not None:
        request_dict["meta"] = meta
    url = request_dict.pop("url")
    if "\t" in url or not url:
        return "", request_dict_to_json({"url": url, **request_dict}, max_bytes)
    meta = dict(request_dict.pop("meta") or {})
    shape: dict[str, Any] = {}
    url_meta = {}
    for name, value in list(meta.items()):
        if isinstance(value, str) and value.endswith(url):
            prefix = value[: len(value) - len(url)]
            if len(prefix) <= MAX_URL_META_PREFIX:
                url_meta[name] = prefix
                del meta[name]
    if url_meta:
        shape["url_meta"] = url_meta
    if host_meta is not None and host and meta.get(host_meta) == host:
        shape["host_meta"] = host_meta
        del meta[host_meta]
    fields = {
        name: value for name, value in request_dict.items() if DEFAULTS.get(name, _MISSING) != value
    }
    if meta:
        fields["meta"] = meta
    shape.update(_json_safe({name: fields.pop(name) for name in SHAPE_FIELDS if name in fields}))
    shape_json = _dumps(shape, sort_keys=True)
    tail = f"{url}\t{_dumps(_json_safe(fields))}" if fields else url
    _check_size(len(shape_json) + len(tail), max_bytes)
    return shape_json, tail


def _to_dict(
    request: Request, spider: Spider | None, shapes: RequestShapes | None = None
) -> dict[str, Any]:
    try:
        return shapes.to_dict(request) if shapes is not None else request.to_dict(spider=spider)
    except ValueError as exc:
        raise RequestNotSerializable(
            f"callback/errback of {request} is not a method of the spider {spider!r} ({exc}); "
            "only spider methods can be stored, they are looked up by name when loaded"
        ) from exc


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
    request_dict = _to_dict(request, spider, shapes)
    if meta is not None:
        request_dict["meta"] = meta
    return request_dict_to_json(request_dict, max_bytes)
