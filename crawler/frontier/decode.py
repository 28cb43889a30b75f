"""Stored requests back from JSON, strictly: whatever sits in Redis or a ``JOBDIR`` queue,
decoding returns a :class:`~scrapy.Request` or raises :class:`RequestNotLoadable` with a
reason, and runs no code the worker did not ship.

A stored request is untrusted input (anyone who can write to the crawl's Redis keys can put
one there), so before a request is built:

- its size is capped (``FRONTIER_MAX_REQUEST_BYTES``; the encoder refuses to store a larger
  one) and it must be UTF-8 JSON without ``NaN``/``Infinity``, nested at most
  :data:`MAX_DEPTH` levels;
- its format version is one this code reads (:data:`READABLE_VERSIONS`; the unversioned
  format of earlier releases is read as version 0, which has the same fields as 1 and as
  2's JSON objects);
- a compact record (format 2, ``2<TAB><shape id><TAB><url>[<TAB><JSON fields>]``, see
  :mod:`bloom_frontier.frontier.serialize`) names a shape the crawl's table holds, given beside
  it; the shape (JSON) and the fields are checked as strictly as a JSON request, and may
  only hold what each may hold (:data:`SHAPE_FIELDS` in the shape, the other fields beside
  the URL);
- the request class is compared, as a string and before anything is imported, with Scrapy's
  request classes and ``FRONTIER_REQUEST_CLASSES``;
- every field is one the class takes, of the type it takes (unknown fields are refused,
  never ignored); the encoding is a known text codec;
- callbacks and errbacks name a plain method of the spider's class hierarchy
  (:func:`spider_method`): never a dunder, nor anything ``scrapy.Spider`` or ``object``
  defines (``start``, ``close``, ``from_crawler``, ``_set_crawler``...), nor a private
  helper of Scrapy's generic spiders other than their own callbacks; a spider that lists
  its callbacks in ``stored_callbacks`` (the ``site`` spider does) gets only those;
- ``meta`` keys that change how a request is fetched are honoured only as far as the
  crawl's settings allow them for any request, and keys of Scrapy's and the frontier's must
  hold values of their type (:mod:`bloom_frontier.frontier.storedmeta`).

Any other failure while building the request (``RecursionError``, ``MemoryError``, a
``LookupError`` from a codec...) is caught into :class:`RequestNotLoadable` too.
"""

from __future__ import annotations

import base64
import binascii
import codecs
import inspect
import json
import re
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from scrapy import Request, Spider
from scrapy.spiders import CrawlSpider, SitemapSpider
from scrapy.utils.misc import load_object

from bloom_frontier import defaults
from bloom_frontier.frontier.storedmeta import StoredMeta, StoredMetaRefused

if TYPE_CHECKING:
    from typing import Self

    from scrapy.settings import BaseSettings
    from scrapy.statscollectors import StatsCollector

#: The stored format written now: compact records in the shared frontier's lanes, JSON
#: objects (``"v": 2``) elsewhere. Versions 0 (no ``"v"`` field) and 1 are JSON objects with
#: the same fields.
FORMAT_VERSION = 2
#: Versions this code reads.
READABLE_VERSIONS = frozenset({0, 1, FORMAT_VERSION})
#: A compact record starts with its version and a tab.
COMPACT_PREFIX = f"{FORMAT_VERSION}\t"
#: Fields a compact record keeps in its shape, shared by the requests of one call site.
SHAPE_FIELDS = ("_class", "callback", "errback", "flags", "method", "encoding", "dont_filter")
#: Longest text in front of the URL in a ``meta`` value a shape names (the key's ``r2|``).
MAX_URL_META_PREFIX = 8
_SHAPE_ID = re.compile(r"[0-9]{1,12}")
#: Deepest nesting of lists and dicts in a stored request (its meta, cb_kwargs, cookies).
MAX_DEPTH = 32
#: Longest reason kept (messages quote the input).
MAX_REASON = 300

#: Request classes a stored request may name, as ``Request.to_dict`` spells them (and the
#: public aliases). More with ``FRONTIER_REQUEST_CLASSES``.
REQUEST_CLASSES = frozenset(
    {
        "scrapy.Request",
        "scrapy.http.Request",
        "scrapy.http.request.Request",
        "scrapy.FormRequest",
        "scrapy.http.FormRequest",
        "scrapy.http.request.form.FormRequest",
        "scrapy.http.JsonRequest",
        "scrapy.http.request.json_request.JsonRequest",
        "scrapy.http.XmlRpcRequest",
        "scrapy.http.request.rpc.XmlRpcRequest",
    }
)
#: Private methods of Scrapy's generic spiders that are their callbacks: a CrawlSpider's
#: links and a SitemapSpider's sitemaps are stored with these names.
GENERIC_SPIDER_CALLBACKS: dict[type, frozenset[str]] = {
    CrawlSpider: frozenset({"_callback", "_errback"}),
    SitemapSpider: frozenset({"_parse_sitemap"}),
}
#: Names ``scrapy.Spider`` defines; of these only ``parse`` is meant to be a callback.
SPIDER_NAMES = frozenset(dir(Spider)) - {"parse"}

_METHOD = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,32}")
#: Tags of the values JSON has no type for (see :mod:`bloom_frontier.frontier.serialize`).
BYTES, TUPLE, MAPPING, DICT = "$b", "$t", "$m", "$d"
_MAX_PRIORITY = 2**53


class RequestNotLoadable(ValueError):
    """Stored text that does not give back a request; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        self.reason = reason[:MAX_REASON]
        super().__init__(self.reason)


def _refuse(reason: str) -> RequestNotLoadable:
    return RequestNotLoadable(reason)


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _refuse_constant(name: str) -> Any:
    raise _refuse(f"{name} is not a JSON number")


def decode_value(value: Any, where: str, depth: int = 0) -> Any:
    """A JSON value of the stored form as the Python value it stands for (bytes, tuples,
    non-string-keyed dicts are tagged, see :mod:`bloom_frontier.frontier.serialize`)."""
    if depth > MAX_DEPTH:
        raise _refuse(f"{where}: nested more than {MAX_DEPTH} levels")
    if isinstance(value, list):
        return [decode_value(item, where, depth + 1) for item in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1:
        tag, inner = next(iter(value.items()))
        if tag == BYTES:
            if not isinstance(inner, str):
                raise _refuse(f"{where}: bytes must be base64 text")
            try:
                return base64.b64decode(inner, validate=True)
            except (binascii.Error, ValueError):
                raise _refuse(f"{where}: bytes are not valid base64") from None
        if tag == TUPLE:
            return tuple(decode_value(_expect(inner, list, where), where, depth + 1))
        if tag == MAPPING:
            pairs = []
            for pair in _expect(inner, list, where):
                if not (isinstance(pair, list) and len(pair) == 2):
                    raise _refuse(f"{where}: a mapping entry must be a [key, value] pair")
                key = decode_value(pair[0], where, depth + 2)
                if isinstance(key, (list, dict)):
                    raise _refuse(f"{where}: a mapping key must be hashable")
                pairs.append((key, decode_value(pair[1], where, depth + 2)))
            return dict(pairs)
        if tag == DICT:
            value = _expect(inner, dict, where)
    return {key: decode_value(item, where, depth + 1) for key, item in value.items()}


def _expect(value: Any, kind: type | tuple[type, ...], where: str) -> Any:
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise _refuse(f"{where} must be {names}, not {_type_name(value)}")
    return value


def _text_or_bytes(value: Any, where: str) -> str | bytes:
    return _expect(value, (str, bytes), where)


def _str_dict(value: Any, where: str) -> dict[str, Any]:
    value = _expect(value, dict, where)
    if not all(isinstance(key, str) for key in value):
        raise _refuse(f"{where} must have text keys")
    return value


def _headers(value: Any) -> list[tuple[str | bytes, list[str | bytes]]]:
    pairs = []
    for pair in _expect(value, list, "headers"):
        if not (isinstance(pair, (list, tuple)) and len(pair) == 2):
            raise _refuse("headers must be [name, values] pairs")
        name, values = pair
        values = values if isinstance(values, list) else [values]
        pairs.append(
            (
                _text_or_bytes(name, "a header name"),
                [_text_or_bytes(v, "a header value") for v in values],
            )
        )
    return pairs


def _cookies(value: Any) -> dict[str, Any] | list[dict[str, Any]]:
    scalar = (str, int, float, bool, type(None))
    cookies = [value] if isinstance(value, dict) else _expect(value, (dict, list), "cookies")
    for cookie in cookies:
        cookie = _str_dict(cookie, "cookies")
        if not all(isinstance(item, scalar) for item in cookie.values()):
            raise _refuse("cookie values must be text, numbers, true/false or null")
    return value


def _encoding(value: Any) -> str:
    value = _expect(value, str, "encoding")
    try:
        codec = codecs.lookup(value)
    except (LookupError, ValueError):
        raise _refuse(f"encoding {value[:40]!r} is not a known codec") from None
    if not getattr(codec, "_is_text_encoding", True):
        raise _refuse(f"encoding {value[:40]!r} is not a text encoding")
    return value


def _method(value: Any) -> str:
    value = _expect(value, str, "method")
    if not _METHOD.fullmatch(value):
        raise _refuse(f"method {value[:40]!r} is not an HTTP method token")
    return value


def _priority(value: Any) -> int:
    value = _expect(value, int, "priority")
    if abs(value) > _MAX_PRIORITY:
        raise _refuse("priority is out of range")
    return value


def _flags(value: Any) -> list[str]:
    for flag in _expect(value, list, "flags"):
        _expect(flag, str, "a flag")
    return value


#: How each field of a stored request is checked (after tags are decoded).
FIELDS: dict[str, Callable[[Any], Any]] = {
    "url": lambda value: _expect(value, str, "url"),
    "headers": _headers,
    "body": lambda value: _text_or_bytes(value, "body"),
    "cookies": _cookies,
    "meta": lambda value: _str_dict(value, "meta"),
    "encoding": _encoding,
    "flags": _flags,
    "cb_kwargs": lambda value: _str_dict(value, "cb_kwargs"),
    "dont_filter": lambda value: _expect(value, bool, "dont_filter"),
    "method": _method,
    "priority": _priority,
    "dumps_kwargs": lambda value: _str_dict(value, "dumps_kwargs"),
}


def check_callback_name(name: Any) -> None:
    """Refuse a callback name no spider may be asked for, whatever the spider: not an
    identifier, a dunder, or a name ``scrapy.Spider`` defines (``parse`` excepted)."""
    if not isinstance(name, str) or not name.isidentifier():
        raise _refuse(f"callback {str(name)[:60]!r} is not a method name")
    if name.startswith("__") and name.endswith("__"):
        raise _refuse(f"callback {name!r} is a special method")
    if name in SPIDER_NAMES:
        raise _refuse(f"callback {name!r} is defined by scrapy.Spider, not a callback")


def spider_method(spider: Spider, name: Any) -> Callable[..., Any]:
    """The method ``name`` of ``spider``, bound, if a stored request may name it as its
    callback or errback; else :class:`RequestNotLoadable`.

    Allowed: a plain function defined by the spider's class or a base class, except dunders,
    what ``scrapy.Spider`` and ``object`` define (``parse`` excepted: it is meant to be
    overridden), and private helpers of Scrapy's own spiders other than their callbacks
    (:data:`GENERIC_SPIDER_CALLBACKS`). A spider class with ``stored_callbacks`` (a set of
    names) allows only those: its other methods (a helper such as ``is_short_link``) are
    not callbacks. Looked up on the class, so an instance attribute of the same name (a
    spider argument) never stands in for it.
    """
    check_callback_name(name)
    listed = getattr(type(spider), "stored_callbacks", None)
    if listed is not None and name not in listed:
        raise _refuse(
            f"{name!r} is not a callback of spider {spider.name!r} (its stored_callbacks: "
            f"{', '.join(sorted(listed))})"
        )
    definer = next((cls for cls in type(spider).__mro__ if name in vars(cls)), None)
    if definer is None:
        raise _refuse(f"spider {spider.name!r} has no method {name!r}")
    function = vars(definer)[name]
    if definer in (Spider, object) or not inspect.isfunction(function):
        raise _refuse(f"{name!r} is not a method of spider {spider.name!r}")
    scrapy_private = name.startswith("_") and definer.__module__.startswith("scrapy.")
    if scrapy_private and name not in GENERIC_SPIDER_CALLBACKS.get(definer, ()):
        raise _refuse(f"{name!r} is an internal method of {definer.__qualname__}")
    return types.MethodType(function, spider)


def _json_object(text: str, what: str) -> dict[str, Any]:
    try:
        data = json.loads(text, parse_constant=_refuse_constant)
    except RequestNotLoadable:
        raise
    except RecursionError:
        raise _refuse(f"{what} is nested more than {MAX_DEPTH} levels") from None
    except ValueError as exc:
        raise _refuse(f"{what} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise _refuse(f"{what} is a JSON {_type_name(data)}, not an object")
    return data


@lru_cache(maxsize=1024)
def _shape(text: str) -> dict[str, Any]:
    """A shape's JSON checked: :data:`SHAPE_FIELDS` (checked again with the request's
    fields), ``url_meta`` as (name, prefix) pairs, ``host_meta``. Shared: never mutated."""
    shape = _json_object(text, "shape")
    for name, value in shape.items():
        if name == "url_meta":
            pairs = tuple(_str_dict(value, "url_meta").items())
            if not all(isinstance(p, str) and len(p) <= MAX_URL_META_PREFIX for _, p in pairs):
                raise _refuse(f"url_meta prefixes must be text of {MAX_URL_META_PREFIX} or less")
            shape[name] = pairs
        elif name == "host_meta":
            _expect(value, str, "host_meta")
        elif name not in SHAPE_FIELDS:
            raise _refuse(f"unknown shape field {name[:40]!r}")
    return shape


@dataclass(frozen=True)
class RequestDecoder:
    """Decodes stored requests under the crawl's limits (see the module docstring)."""

    #: Largest stored request, in bytes of JSON text.
    max_bytes: int = defaults.FRONTIER_MAX_REQUEST_BYTES
    #: Request classes a stored request may name besides :data:`REQUEST_CLASSES`.
    extra_classes: frozenset[str] = frozenset()
    #: What a stored request's ``meta`` may change of how it is fetched.
    meta_policy: StoredMeta = field(default_factory=StoredMeta, compare=False)

    @classmethod
    def from_settings(cls, settings: BaseSettings, stats: StatsCollector | None = None) -> Self:
        """The crawl's decoder; what it drops of stored requests' ``meta`` is counted in
        ``stats``."""
        max_bytes = settings.getint("FRONTIER_MAX_REQUEST_BYTES")
        if max_bytes <= 0:
            raise ValueError(f"FRONTIER_MAX_REQUEST_BYTES must be positive, got {max_bytes}")
        return cls(
            max_bytes,
            frozenset(settings.getlist("FRONTIER_REQUEST_CLASSES")),
            StoredMeta.from_settings(settings, stats),
        )

    def vetted(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """``kwargs`` of a stored request with its ``meta`` vetted (see
        :mod:`bloom_frontier.frontier.storedmeta`)."""
        if kwargs.get("meta"):
            try:
                kwargs["meta"] = self.meta_policy.vet(kwargs["meta"], kwargs["url"])
            except StoredMetaRefused as exc:
                raise _refuse(str(exc)) from None
        return kwargs

    def checked_text(self, stored: str | bytes, what: str = "stored request") -> str:
        """``stored`` as text, size-checked and UTF-8."""
        if not isinstance(stored, (str, bytes, bytearray)):
            raise _refuse(f"{what} is a {_type_name(stored)}, not text")
        if len(stored) > self.max_bytes:
            raise _refuse(
                f"{what} is {len(stored)} bytes, more than FRONTIER_MAX_REQUEST_BYTES "
                f"({self.max_bytes})"
            )
        if isinstance(stored, (bytes, bytearray)):
            try:
                return bytes(stored).decode("utf-8")
            except UnicodeDecodeError:
                raise _refuse(f"{what} is not UTF-8 text") from None
        return stored

    def loads(self, text: str | bytes, what: str = "stored request") -> dict[str, Any]:
        """The stored JSON object, size-checked and parsed; tags not yet decoded."""
        return _json_object(self.checked_text(text, what), what)

    def parse(
        self, stored: str | bytes, shape: str | bytes | None = None, host: str | None = None
    ) -> tuple[dict[str, Any], dict[str, str]]:
        """A stored request (a JSON object, or a compact record with the JSON of the shape
        it names, None when the crawl's table has none, and the host of its lane) as the
        JSON object of its fields, tags not yet decoded, and the ``meta`` entries its shape
        names."""
        text = self.checked_text(stored)
        if not text.startswith(COMPACT_PREFIX):
            return _json_object(text, "stored request"), {}
        parts = text.split("\t", 3)
        if len(parts) < 3:
            raise _refuse("a compact record is its version, a shape id and a URL, tab-separated")
        shape_id, url = parts[1], parts[2]
        if not _SHAPE_ID.fullmatch(shape_id):
            raise _refuse(f"shape id {shape_id[:20]!r} is not a number")
        if not shape:
            raise _refuse(f"shape {shape_id} is not in the crawl's table of request shapes")
        data: dict[str, Any] = {"v": FORMAT_VERSION, "url": url}
        named: dict[str, str] = {}
        for name, value in _shape(self.checked_text(shape, "shape")).items():
            if name == "url_meta":
                for meta_name, prefix in value:
                    named[meta_name] = prefix + url
            elif name == "host_meta":
                if host is None:
                    raise _refuse(f"shape {shape_id} names the host, and no lane was given")
                named[value] = host
            else:
                data[name] = value
        if len(parts) == 4:
            for name, value in _json_object(parts[3], "compact record's fields").items():
                if name in data or name in SHAPE_FIELDS or name == "v":
                    raise _refuse(f"field {name[:40]!r} may not stand beside the URL")
                data[name] = value
        return data, named

    def request_class(self, name: Any) -> type[Request]:
        """The request class named ``name``, checked by name before it is imported."""
        if name is None:
            return Request
        if not isinstance(name, str):
            raise _refuse(f"_class must be text, not {_type_name(name)}")
        if name not in REQUEST_CLASSES and name not in self.extra_classes:
            raise _refuse(
                f"request class {name[:80]!r} is not allowed (Scrapy's request classes and "
                "FRONTIER_REQUEST_CLASSES)"
            )
        request_class = load_object(name)
        if not (isinstance(request_class, type) and issubclass(request_class, Request)):
            raise _refuse(f"{name!r} is not a Request class")
        return request_class

    def fields(self, data: dict[str, Any]) -> tuple[type[Request], dict[str, Any]]:
        """The request class and its keyword arguments, every field checked; callbacks
        still by name."""
        version = data.get("v", 0)
        if isinstance(version, bool) or version not in READABLE_VERSIONS:
            raise _refuse(
                f"stored format version {str(version)[:20]} is not one this worker reads "
                f"({sorted(READABLE_VERSIONS)}): upgrade the worker"
            )
        request_class = self.request_class(data.get("_class"))
        allowed = set(request_class.attributes)
        kwargs: dict[str, Any] = {}
        for name, value in data.items():
            if name in ("v", "_class"):
                continue
            if name not in allowed:
                raise _refuse(f"unknown field {name[:40]!r}")
            if name in ("callback", "errback"):
                if value is not None:
                    kwargs[name] = _expect(value, str, name)
                continue
            check = FIELDS.get(name)
            decoded = decode_value(value, name)
            kwargs[name] = check(decoded) if check else decoded
        if "url" not in kwargs:
            raise _refuse("stored request has no url")
        return request_class, kwargs

    def decode_dict(self, text: str | bytes) -> dict[str, Any]:
        """``text`` as the dict :meth:`scrapy.Request.to_dict` gave (for Scrapy's disk
        queues, which build the request themselves and look callbacks up by name: the names
        are checked here as far as they can be without the spider)."""
        try:
            request_class, kwargs = self.fields(self.loads(text))
            kwargs = self.vetted(kwargs)
            for name in ("callback", "errback"):
                if kwargs.get(name) is not None:
                    check_callback_name(kwargs[name])
        except RequestNotLoadable:
            raise
        except Exception as exc:  # the promise: only the decoder's own error escapes
            raise _refuse(f"stored request is not valid: {type(exc).__name__}: {exc}") from None
        if request_class is not Request:
            kwargs["_class"] = f"{request_class.__module__}.{request_class.__qualname__}"
        return kwargs

    def decode(
        self,
        text: str | bytes,
        spider: Spider | None = None,
        *,
        shape: str | bytes | None = None,
        host: str | None = None,
    ) -> Request:
        """The request stored as ``text`` (a compact record: with the JSON of its
        ``shape`` and the ``host`` of its lane); callbacks are methods of ``spider``."""
        try:
            data, named = self.parse(text, shape, host)
            request_class, kwargs = self.fields(data)
            if named:
                meta = kwargs.setdefault("meta", {})
                if not named.keys().isdisjoint(meta):
                    raise _refuse("meta has an entry its shape names too")
                meta.update(named)
            kwargs = self.vetted(kwargs)
            for name in ("callback", "errback"):
                if kwargs.get(name) is None:
                    continue
                if spider is None:
                    raise _refuse(f"{name} {kwargs[name]!r} needs a spider to resolve it")
                kwargs[name] = spider_method(spider, kwargs[name])
            return request_class(**kwargs)
        except RequestNotLoadable:
            raise
        except Exception as exc:  # the promise: only the decoder's own error escapes
            reason = f"cannot rebuild the stored request: {type(exc).__name__}: {exc}"
            raise _refuse(reason) from None


def record_url(stored: bytes | str) -> str | None:
    """The URL of a stored request, a compact record or a JSON object, the rest unchecked;
    None when the text (untrusted) is not one. For reading what a frontier holds.

    >>> record_url("2\t1\thttps://example.com/a")
    'https://example.com/a'
    >>> record_url('{"url": "https://example.com/b"}')
    'https://example.com/b'
    """
    if isinstance(stored, (bytes, bytearray)):
        stored = bytes(stored).decode("utf-8", "replace")
    if stored.startswith(COMPACT_PREFIX):
        parts = stored.split("\t", 3)
        return parts[2] if len(parts) > 2 and parts[2] else None
    try:
        url = json.loads(stored).get("url")
    except (ValueError, AttributeError, RecursionError):
        return None
    return url if isinstance(url, str) else None


#: Decoder with the default limits.
DEFAULT_DECODER = RequestDecoder()


def request_from_json(
    text: str | bytes, spider: Spider | None = None, decoder: RequestDecoder = DEFAULT_DECODER
) -> Request:
    """The request :func:`bloom_frontier.frontier.serialize.request_to_json` stored as ``text``;
    :class:`RequestNotLoadable` (with its ``reason``) for anything else."""
    return decoder.decode(text, spider)


def request_dict_from_json(text: str | bytes) -> dict[str, Any]:
    """Inverse of :func:`bloom_frontier.frontier.serialize.request_dict_to_json` (``JOBDIR`` disk
    queues): checked like :func:`request_from_json`, callbacks left as names."""
    return DEFAULT_DECODER.decode_dict(text)
