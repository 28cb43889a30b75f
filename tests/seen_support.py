"""What the RedisBloom seen-filter tests share: settings, page-like keys, and worker
processes racing to add the same keys."""

from __future__ import annotations

import json
import multiprocessing
import random
from multiprocessing.synchronize import Barrier

from scrapy.settings import Settings

from bloom_frontier.redis_client import redis_from_url
from bloom_frontier.seen.sharded import ShardedBloomSeenFilter, seen_filter_from_settings

#: Keys every racing worker adds, each in its own order.
SHARED_KEYS = 2000


def open_filter(url: str, key: str = "books:seen", **overrides: object) -> ShardedBloomSeenFilter:
    """The seen filter at ``key`` that the project's settings with ``overrides`` make, on a
    new connection to ``url`` (close it with ``seen.client.close()``; closed already if the
    filter is refused)."""
    settings = Settings()
    settings.setmodule("bloom_frontier.defaults")
    settings.update(overrides)
    client = redis_from_url(url)
    try:
        return seen_filter_from_settings(client, key, settings)
    except BaseException:
        client.close()
        raise


def page_keys(count: int, site: str = "example.com") -> list[str]:
    """``count`` distinct dedupe keys shaped like a site's page links."""
    return [
        f"v1|https://www.{site}/catalogue/category/books_{n}/page-{n % 50}.html"
        for n in range(count)
    ]


def _add_shared_keys(
    url: str,
    overrides: dict[str, object],
    seed: int,
    start: Barrier,
) -> None:
    """One worker process: add the shared keys in its own order, in page-sized batches;
    report the keys it was told are new."""
    keys = page_keys(SHARED_KEYS)
    random.Random(seed).shuffle(keys)
    seen = open_filter(url, **overrides)
    start.wait(timeout=60)
    new = []
    for offset in range(0, len(keys), 25):
        batch = keys[offset : offset + 25]
        new += [key for key, is_new in zip(batch, seen.add_many(batch), strict=True) if is_new]
    seen.client.rpush("test:new", json.dumps(new))
    seen.client.close()


def race_to_add_shared_keys(
    url: str, workers: int, **overrides: object
) -> tuple[list[int | None], list[list[str]]]:
    """Start ``workers`` processes at once, each adding :data:`SHARED_KEYS` through its own
    :func:`open_filter` with ``overrides``; return their exit codes and, per
    worker, the keys it was told are new."""
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(workers)
    processes = [
        context.Process(target=_add_shared_keys, args=(url, overrides, seed, start))
        for seed in range(workers)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=120)
    client = redis_from_url(url)
    reports = [json.loads(report) for report in client.lrange("test:new", 0, -1)]
    client.close()
    return [process.exitcode for process in processes], reports
