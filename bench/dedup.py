"""Shared dedup in Redis: this project's RedisBloom filter vs scrapy-redis' fingerprint set.

Starts its own redis-server with RedisBloom (nothing else touches it) and, in one run:

- this project's path: :meth:`RedisBloomSeenFilter.add_many` in batches of ``--batch`` dedupe
  keys (one round trip per batch, the way a page's links are checked), keys/s for one worker;
- scrapy-redis' path: one ``SADD`` of a request's SHA1 fingerprint (hex) per request, one
  round trip each, keys/s;
- Redis bytes per URL once ``--keys`` URLs are in: ``MEMORY USAGE`` of the set and of the
  filter, against the Bloom optimum ``-ln(p) / ln(2)^2`` bits per key for the configured
  error rate; also for a NONSCALING filter and for a scaling filter that had to grow.

    .venv/bin/python -m bench.dedup [--keys 1000000] [--batch 1000] [--sadd-sample 100000]
"""

from __future__ import annotations

import argparse
import hashlib
import math
import time
from collections.abc import Callable, Sequence

import redis
from scrapy.settings import Settings

from bloom_frontier.redis_client import redis_from_url
from bloom_frontier.seen.redis import RedisBloomSeenFilter
from tests.servers import RedisServer

TARGET_SPEEDUP = 40.0
TARGET_MEMORY_RATIO = 1.1
FILL_BATCH = 10_000

SECTIONS = ("catalogue", "news", "products", "docs", "forum/thread", "blog/2024", "category/shoes")


def dedupe_keys(count: int) -> list[str]:
    """Distinct keys shaped like real dedupe keys (60-80 characters)."""
    return [
        f"v1|https://www.shop{n % 977}.example/{SECTIONS[n % len(SECTIONS)]}/"
        f"item-{n}-blue.html?page={n % 61}&sort=price"
        for n in range(count)
    ]


def rate(count: int, seconds: float) -> str:
    return f"{count / seconds:>12,.0f} keys/s"


def timed(run: Callable[[], None]) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def fill_bloom(client: redis.Redis, key: str, keys: Sequence[str]) -> None:
    """Add keys in pipelined BF.MADD batches: memory figures only, not timed."""
    with client.pipeline(transaction=False) as pipe:
        for offset in range(0, len(keys), FILL_BATCH):
            pipe.bf().madd(key, *keys[offset : offset + FILL_BATCH])
        pipe.execute()


def memory_usage(client: redis.Redis, key: str) -> int:
    """Bytes Redis holds for ``key``, counted exactly (SAMPLES 0)."""
    return int(client.memory_usage(key, samples=0) or 0)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=1_000_000, help="URLs added (default 1M)")
    parser.add_argument("--batch", type=int, default=1000, help="keys per add_many (one page)")
    parser.add_argument(
        "--sadd-sample",
        type=int,
        default=100_000,
        help="requests timed one SADD at a time; the rest of the set is filled pipelined",
    )
    args = parser.parse_args(argv)
    settings = Settings()
    settings.setmodule("bloom_frontier.defaults")
    capacity = settings.getint("SEEN_FILTER_CAPACITY")
    error_rate = settings.getfloat("SEEN_FILTER_ERROR_RATE")
    expansion = settings.getint("SEEN_FILTER_EXPANSION")
    keys = dedupe_keys(args.keys)
    mean_length = sum(map(len, keys)) / len(keys)
    optimum = -math.log(error_rate) / math.log(2) ** 2 / 8
    print(
        f"{args.keys:,} dedupe keys of {mean_length:.0f} chars on average; settings: capacity "
        f"{capacity:,}, error rate {error_rate}, expansion {expansion}"
    )

    with RedisServer(bloom=True) as server:
        client = redis_from_url(server.url)

        # (a) This project: one add_many round trip per batch of keys.
        seen = RedisBloomSeenFilter(client, "bench:seen", capacity, error_rate, expansion)

        def add_batches() -> None:
            for offset in range(0, len(keys), args.batch):
                seen.add_many(keys[offset : offset + args.batch])

        bloom_seconds = timed(add_batches)
        bloom_rate = len(keys) / bloom_seconds
        info = seen.info()
        assert info is not None
        bloom_bytes = memory_usage(client, seen.key)
        replies = [key for key in client.scan_iter("bench:seen:reply:*", count=1000)]
        reply_bytes = sum(memory_usage(client, key) for key in replies)

        # (b) scrapy-redis: SADD of each request's SHA1 fingerprint, one round trip each.
        sample = keys[: min(args.sadd_sample, len(keys))]

        def sadd_each() -> None:
            for key in sample:
                client.sadd("bench:fingerprints", hashlib.sha1(key.encode()).hexdigest())

        sadd_seconds = timed(sadd_each)
        sadd_rate = len(sample) / sadd_seconds
        with client.pipeline(transaction=False) as pipe:
            rest = keys[len(sample) :]
            for offset in range(0, len(rest), FILL_BATCH):
                fingerprints = [
                    hashlib.sha1(key.encode()).hexdigest()
                    for key in rest[offset : offset + FILL_BATCH]
                ]
                pipe.sadd("bench:fingerprints", *fingerprints)
            pipe.execute()
        set_bytes = memory_usage(client, "bench:fingerprints")

        # Other ways to size the filter, same keys.
        client.bf().create("bench:nonscaling", error_rate, args.keys, noScale=True)
        fill_bloom(client, "bench:nonscaling", keys)
        nonscaling_bytes = memory_usage(client, "bench:nonscaling")
        grown_capacity = max(args.keys // 8, 1)
        client.bf().create("bench:grown", error_rate, grown_capacity, expansion=expansion)
        fill_bloom(client, "bench:grown", keys)
        grown_info = client.bf().info("bench:grown")
        grown_bytes = memory_usage(client, "bench:grown")
        seen.close()
        client.close()

    per_url = {
        f"RedisBloom, reserved for {capacity:,} (this project's default)": bloom_bytes,
        f"RedisBloom NONSCALING for {args.keys:,} (fails once full)": nonscaling_bytes,
        f"RedisBloom for {grown_capacity:,}, grown to {grown_info.filterNum} filters": grown_bytes,
        "scrapy-redis set of SHA1 hex fingerprints": set_bytes,
    }
    print("\nThroughput, one worker, one round trip each:")
    print(f"  add_many, {args.batch} keys per batch    {rate(len(keys), bloom_seconds)}")
    print(f"  SADD fingerprint, one per request  {rate(len(sample), sadd_seconds)}")
    speedup = bloom_rate / sadd_rate
    verdict = "meets" if speedup >= TARGET_SPEEDUP else "MISSES"
    print(f"  ratio {speedup:.1f}x ({verdict} the {TARGET_SPEEDUP:.0f}x target)")

    print(f"\nRedis memory at {args.keys:,} URLs (optimum at {error_rate}: {optimum:.3f} B/URL):")
    for label, size in per_url.items():
        bytes_per_url = size / args.keys
        print(f"  {label:<58} {bytes_per_url:8.3f} B/URL  {bytes_per_url / optimum:6.2f}x optimum")
    print(
        f"  filter: {info.filters} sub-filter(s), capacity {info.capacity:,}, "
        f"{info.items_inserted:,} items; BF.INFO size {info.size_bytes / args.keys:.3f} B/URL"
    )
    print(
        f"  plus transient batch replies: {len(replies)} keys, {reply_bytes / 1024:.0f} KiB, kept "
        "120 s so that a retried\n  batch gets the same answer (not part of the filter)"
    )
    memory_ratio = bloom_bytes / args.keys / optimum
    verdict = "meets" if memory_ratio <= TARGET_MEMORY_RATIO else "MISSES"
    print(
        f"  default filter {memory_ratio:.4f}x optimum ({verdict} the {TARGET_MEMORY_RATIO}x "
        f"target); the set takes {set_bytes / bloom_bytes:.0f}x the filter's memory"
    )
    print(
        "  A scaling filter reserves its first sub-filter at half the error rate, so that the\n"
        "  sum over all sub-filters stays below it: + ln 2 / ln(1/p) = "
        f"{math.log(2) / -math.log(error_rate):.2%} bits per key.\n"
        "  NONSCALING avoids that but refuses keys once full, which would stop a crawl that\n"
        "  outgrows SEEN_FILTER_CAPACITY; sizing the capacity right matters far more (see the\n"
        "  filter that had to grow)."
    )


if __name__ == "__main__":
    main()
