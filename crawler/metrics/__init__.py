"""Prometheus metrics of a crawl: each worker's endpoint and the crawl-wide view from Redis.

- :class:`bloom_frontier.metrics.extension.WorkerMetrics`, an extension the add-on installs, on
  with ``METRICS_PORT``: the worker serves ``http://METRICS_ADDRESS:METRICS_PORT/metrics``
  from prometheus_client's own thread server, so a scrape never runs on Twisted's loop. The
  figures are read at each scrape: the crawler's stats (the counts the crawl keeps anyway),
  the record store's writer and, on a shared frontier, the crawl-wide readings of
  ``scrapy frontier`` (:func:`bloom_frontier.frontier.status.read_status`) and a Redis
  round trip, over a client of its own.
- ``scrapy frontier SPIDER --metrics`` prints those crawl-wide families once, for those who
  scrape no worker (:func:`bloom_frontier.metrics.families.crawl_metrics_text`).

This module holds what needs no prometheus_client (the endpoint's settings, the host classes
of the backoff counters, the pre-start check); :mod:`bloom_frontier.metrics.families` builds
the metric families and is imported only when metrics are asked for (it needs the
``[metrics]`` extra). Every metric: ``docs/metrics.md``.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bloom_frontier.extras import require_extra
from bloom_frontier.shorteners import Shorteners, shorteners_from_settings

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings
    from scrapy.statscollectors import StatsCollector

    from bloom_frontier.frontier.politeness import HostLimits
    from bloom_frontier.redis_client import Client

#: The extra that installs prometheus_client, and the module it installs.
EXTRA = "metrics"
MODULE = "prometheus_client"
#: The labels of the backoff counters: a host name would be a label without bound.
HOST_CLASSES = ("shortener", "configured", "other")


class MetricsSetupError(ValueError):
    """An endpoint a worker cannot serve metrics at (the port taken, the address not this
    machine's); the message says which."""


@dataclass(frozen=True)
class Endpoint:
    """Where a worker serves its metrics, and how long after the spider closed."""

    address: str
    port: int
    linger: float

    @property
    def url(self) -> str:
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"http://{host}:{self.port}/metrics"


def endpoint_from_settings(settings: BaseSettings) -> Endpoint | None:
    """The endpoint ``METRICS_PORT``, ``METRICS_ADDRESS`` and ``METRICS_LINGER`` describe;
    None when ``METRICS_PORT`` is unset (no endpoint). The values are the ones
    :func:`bloom_frontier.validation.check_settings` allowed before the crawl started."""
    port = settings.get("METRICS_PORT")
    if port in (None, ""):
        return None
    return Endpoint(
        str(settings.get("METRICS_ADDRESS")), int(port), settings.getfloat("METRICS_LINGER")
    )


def check_metrics_setup(settings: BaseSettings) -> None:
    """Before a crawl starts (after the settings check): the ``[metrics]`` extra is installed
    (:class:`~bloom_frontier.extras.MissingExtra`) and the address and port can be listened
    on (:class:`MetricsSetupError`: taken, or not an address of this machine)."""
    endpoint = endpoint_from_settings(settings)
    if endpoint is None:
        return
    require_extra(MODULE, EXTRA, "METRICS_PORT (the worker's Prometheus endpoint)")
    try:
        infos = socket.getaddrinfo(endpoint.address, endpoint.port, type=socket.SOCK_STREAM)
        family, kind, proto, _, address = infos[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    except OSError as exc:
        raise MetricsSetupError(
            f"cannot serve metrics at {endpoint.url} ({exc.strerror or exc}): choose another "
            "METRICS_PORT (one per worker on a machine) or METRICS_ADDRESS"
        ) from None


class HostClasses:
    """The class of a politeness host (a download slot key), for metric labels: a
    link-shortener host (``shortener``), a host with its own ``DOWNLOAD_SLOTS`` entry
    (``configured``), or any other (``other``)."""

    def __init__(self, shorteners: Shorteners, configured: frozenset[str]) -> None:
        self.shorteners = shorteners
        self.configured = configured

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> HostClasses:
        return cls(
            shorteners_from_settings(settings), frozenset(settings.getdict("DOWNLOAD_SLOTS"))
        )

    def count(self, stats: StatsCollector, name: str, host: str) -> None:
        """Count ``name`` for ``host``: under ``name`` and under ``name/<its class>`` (the
        metrics' ``host_class`` label)."""
        stats.inc_value(name)
        stats.inc_value(f"{name}/{self.of(host)}")

    def of(self, host: str) -> str:
        """The class of ``host``.

        >>> classes = HostClasses(Shorteners(), frozenset({"slow.example", "bit.ly"}))
        >>> classes.of("bit.ly"), classes.of("slow.example"), classes.of("example.com")
        ('shortener', 'configured', 'other')
        """
        if self.shorteners.is_host(host):
            return "shortener"
        return "configured" if host in self.configured else "other"


def crawl_metrics(client: Client, prefix: str, error_rate: float, limits: HostLimits) -> str:
    """``scrapy frontier SPIDER --metrics``: the crawl-wide families of the shared frontier
    under ``prefix`` in Prometheus' text format (``[metrics]`` extra:
    :class:`~bloom_frontier.extras.MissingExtra`)."""
    require_extra(MODULE, EXTRA, "scrapy frontier --metrics")
    from bloom_frontier.metrics.families import crawl_metrics_text

    return crawl_metrics_text(client, prefix, error_rate, limits)
