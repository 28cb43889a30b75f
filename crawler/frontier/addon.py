"""Scrapy add-on: with ``REDIS_URL`` set, crawl from the shared Redis frontier."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scrapy.settings import Settings

#: Lowest order: next to the engine, it sees only the failures no other middleware handled.
LEASE_MIDDLEWARE_ORDER = 1


class RedisFrontierAddon:
    """Installs :class:`crawler.frontier.scheduler.RedisScheduler` and its
    :class:`crawler.frontier.scheduler.LeaseMiddleware` when ``REDIS_URL`` is set, from
    any source (settings module, environment, ``-s REDIS_URL=...``); without it, Scrapy's
    own scheduler and the embedded frontier stay."""

    def update_settings(self, settings: Settings) -> None:
        if not settings.get("REDIS_URL"):
            return
        from crawler.frontier.scheduler import LeaseMiddleware, RedisScheduler

        settings.set("SCHEDULER", RedisScheduler, "addon")
        settings.set_in_component_priority_dict(
            "DOWNLOADER_MIDDLEWARES", LeaseMiddleware, LEASE_MIDDLEWARE_ORDER
        )
