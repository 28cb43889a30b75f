"""Requests as JSON text, for the Redis frontier and the ``JOBDIR`` disk queues (no pickle).

Scrapy's :meth:`~scrapy.Request.to_dict` / :func:`~scrapy.utils.request.request_from_dict`
do the request-level work (callbacks and errbacks by spider method name, the request class);
this module makes the resulting dict JSON-safe and back, losslessly:

- ``bytes`` (body, header names and values, meta values) become ``{"$b": "<base64>"}``;
- tuples become ``{"$t": [...]}``, dicts with non-string keys ``{"$m": [[key, value], ...]}``;
- a dict that happens to look like one of these tags is wrapped as ``{"$d": {...}}``.

Anything else JSON cannot hold (a lambda callback, a method of another object, an arbitrary
object or a NaN in ``meta`` / ``cb_kwargs``) raises :class:`RequestNotSerializable` naming
where it sits, when the request is *stored*, so the worker that made it hears about it,
never the one that later loads it.
"""

from __future__ import annotations

import base64
import json
import math
from typing import TYPE_CHECKING, Any

from scrapy import Request
from scrapy.utils.misc import load_object
from scrapy.utils.request import request_from_dict

if TYPE_CHECKING:
    from scrapy import Spider

_BYTES, _TUPLE, _MAPPING, _DICT = "$b", "$t", "$m", "$d"
_TAGS = frozenset({_BYTES, _TUPLE, _MAPPING, _DICT})


class RequestNotSerializable(ValueError):
    """A request that cannot be stored as JSON; ``reason`` says which part and why.

    A ``ValueError``, like the errors Scrapy's own disk queues raise, so Scrapy's scheduler
    keeps such a request in memory (counted under ``scheduler/unserializable``).
    """

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


class RequestNotLoadable(ValueError):
    """Stored JSON that does not give back a request (corrupt, or names an unknown class or
    a spider method this code does not have)."""


def _encode(value: Any, where: str) -> Any:
    """``value`` as plain JSON data, tagging what JSON has no type for."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise RequestNotSerializable(f"{where}: {value!r} has no JSON form")
        return value
    if isinstance(value, (bytes, bytearray)):
        return {_BYTES: base64.b64encode(value).decode("ascii")}
    if isinstance(value, tuple):
        return {_TUPLE: [_encode(item, f"{where}[{i}]") for i, item in enumerate(value)]}
    if isinstance(value, list):
        return [_encode(item, f"{where}[{i}]") for i, item in enumerate(value)]
    if isinstance(value, dict):
        if all(isinstance(key, str) for key in value):
            encoded = {key: _encode(item, f"{where}[{key!r}]") for key, item in value.items()}
            if len(encoded) == 1 and next(iter(encoded)) in _TAGS:
                return {_DICT: encoded}
            return encoded
        return {
            _MAPPING: [
                [_encode(key, f"{where} key {key!r}"), _encode(item, f"{where}[{key!r}]")]
                for key, item in value.items()
            ]
        }
    raise RequestNotSerializable(
        f"{where}: a {type(value).__module__}.{type(value).__qualname__} object is not "
        "JSON-serializable (store only str, numbers, bool, None, bytes, lists, tuples and "
        "dicts in meta and cb_kwargs)"
    )


def _decode(value: Any) -> Any:
    """Inverse of :func:`_encode`."""
    if isinstance(value, list):
        return [_decode(item) for item in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1:
        tag, inner = next(iter(value.items()))
        if tag == _BYTES:
            return base64.b64decode(inner, validate=True)
        if tag == _TUPLE:
            return tuple(_decode(item) for item in inner)
        if tag == _MAPPING:
            return {_decode(key): _decode(item) for key, item in inner}
        if tag == _DICT:
            return {key: _decode(item) for key, item in inner.items()}
    return {key: _decode(item) for key, item in value.items()}


def request_dict_to_json(request_dict: dict[str, Any]) -> str:
    """A dict from :meth:`scrapy.Request.to_dict` (callbacks already named) as JSON text."""
    # Header names are bytes: as a list of pairs they need no non-string-keyed mapping.
    request_dict = {**request_dict, "headers": list(request_dict["headers"].items())}
    data = {key: _encode(value, key) for key, value in request_dict.items()}
    return json.dumps(data, separators=(",", ":"), allow_nan=False)


def request_dict_from_json(text: str | bytes) -> dict[str, Any]:
    """Inverse of :func:`request_dict_to_json`; :class:`RequestNotLoadable` on bad input."""
    try:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise RequestNotLoadable(f"stored request is a JSON {type(data).__name__}")
        return {key: _decode(value) for key, value in data.items()}
    except (ValueError, TypeError, AttributeError) as exc:
        if isinstance(exc, RequestNotLoadable):
            raise
        raise RequestNotLoadable(f"stored request is not valid: {exc}") from exc


def request_to_json(request: Request, spider: Spider | None = None) -> str:
    """``request`` as JSON text; :class:`RequestNotSerializable` if it has no JSON form.

    Callbacks and errbacks are stored by name, so they must be methods of ``spider``.
    """
    try:
        request_dict = request.to_dict(spider=spider)
    except ValueError as exc:
        raise RequestNotSerializable(
            f"callback/errback of {request} is not a method of the spider {spider!r} ({exc}); "
            "only spider methods can be stored, they are looked up by name when loaded"
        ) from exc
    return request_dict_to_json(request_dict)


def request_from_json(text: str | bytes, spider: Spider | None = None) -> Request:
    """Inverse of :func:`request_to_json`: callbacks are looked up on ``spider`` by name.

    :class:`RequestNotLoadable` if the text is not a stored request, names a class that is
    not a :class:`~scrapy.Request`, or a method ``spider`` does not have.
    """
    request_dict = request_dict_from_json(text)
    class_path = request_dict.get("_class")
    try:
        if class_path is not None:
            request_class = load_object(class_path)
            if not (isinstance(request_class, type) and issubclass(request_class, Request)):
                raise RequestNotLoadable(f"{class_path!r} is not a Request class")
        return request_from_dict(request_dict, spider=spider)
    except RequestNotLoadable:
        raise
    except (KeyError, TypeError, ValueError, ImportError, NameError, AttributeError) as exc:
        raise RequestNotLoadable(f"cannot rebuild the stored request: {exc}") from exc
