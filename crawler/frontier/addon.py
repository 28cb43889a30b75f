"""Scrapy add-on: with ``REDIS_URL`` set, crawl from the shared Redis frontier."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scrapy.settings import Settings

#: Lowest order: next to the engine, it sees only the failures no other middleware handled.
LEASE_MIDDLEWARE_ORDER = 1
#: Right after Scrapy's RobotsTxtMiddleware (100): it must see the wait for robots.txt.
POLITENESS_MIDDLEWARE_ORDER = 101


class RedisFrontierAddon:
    """Installs :class:`crawler.frontier.scheduler.RedisScheduler` and its
    :class:`crawler.frontier.scheduler.LeaseMiddleware` when ``REDIS_URL`` is set, from
    any source (settings module, environment, ``-s REDIS_URL=...``); without it, Scrapy's
    own scheduler and the embedded frontier stay. Also installs
    :class:`middlewares.politeness.GlobalPolitenessMiddleware`, the worker's side of global
    per-host politeness."""

    def update_settings(self, settings: Settings) -> None:
        if not settings.get("REDIS_URL"):
            return
        from crawler.frontier.scheduler import LeaseMiddleware, RedisScheduler
        from middlewares.politeness import GlobalPolitenessMiddleware

        settings.set("SCHEDULER", RedisScheduler, "addon")
        settings.set_in_component_priority_dict(
            "DOWNLOADER_MIDDLEWARES", LeaseMiddleware, LEASE_MIDDLEWARE_ORDER
        )
        settings.set_in_component_priority_dict(
            "DOWNLOADER_MIDDLEWARES", GlobalPolitenessMiddleware, POLITENESS_MIDDLEWARE_ORDER
        )
