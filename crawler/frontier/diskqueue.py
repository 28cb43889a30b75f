"""``JOBDIR`` disk queues that store requests as JSON instead of pickle.

Built from Scrapy's own queue helpers (:mod:`scrapy.squeues`), only the serializer differs:
a request that has no JSON form raises :class:`~crawler.frontier.serialize.RequestNotSerializable`
(a ``ValueError``), so Scrapy's scheduler keeps it in memory and counts it under
``scheduler/unserializable``, exactly as it does for requests pickle cannot handle.
"""

from __future__ import annotations

from typing import Any

from queuelib import queue
from scrapy.squeues import _scrapy_serialization_queue, _serializable_queue, _with_mkdir

from crawler.frontier.decode import request_dict_from_json
from crawler.frontier.serialize import request_dict_to_json


def _dumps(request_dict: dict[str, Any]) -> bytes:
    return request_dict_to_json(request_dict).encode()


JsonFifoDiskQueue = _scrapy_serialization_queue(
    _serializable_queue(_with_mkdir(queue.FifoDiskQueue), _dumps, request_dict_from_json)  # type: ignore[arg-type]
)
JsonLifoDiskQueue = _scrapy_serialization_queue(
    _serializable_queue(_with_mkdir(queue.LifoDiskQueue), _dumps, request_dict_from_json)  # type: ignore[arg-type]
)
