"""RedisBloom seen filter and Redis connections, against real redis-server processes."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import pytest
import redis

from bloom_frontier.redis_client import RedisSetupError, redis_from_url, require_bloom
from bloom_frontier.seen import SeenFilter
from bloom_frontier.seen.redis import RedisBloomSeenFilter
from tests.seen_support import SHARED_KEYS, open_filter, page_keys, race_to_add_shared_keys
from tests.servers import RedisServer, make_tls_files

WORKERS = 8


def test_reports_new_keys_once(redis_url: str) -> None:
    seen = open_filter(redis_url)
    assert isinstance(seen, SeenFilter)
    first, second, third = page_keys(3)
    assert seen.add_many([first, second, first]) == [True, True, False]
    assert seen.add_many([second, third]) == [False, True]
    assert seen.add_many([]) == []
    seen.client.close()


def test_workers_of_one_crawl_share_the_filter(redis_url: str) -> None:
    one = open_filter(redis_url, "{books}:seen")
    other = open_filter(redis_url, "{books}:seen")
    another_crawl = open_filter(redis_url, "{quotes}:seen")
    keys = page_keys(10)
    assert one.add_many(keys) == [True] * 10
    assert other.add_many(keys) == [False] * 10
    assert another_crawl.add_many(keys) == [True] * 10
    for seen in (one, other, another_crawl):
        seen.client.close()


@pytest.mark.slow
def test_concurrent_processes_get_each_key_new_exactly_once(redis_url: str) -> None:
    exitcodes, reports = race_to_add_shared_keys(redis_url, WORKERS)
    assert exitcodes == [0] * WORKERS
    assert len(reports) == WORKERS
    new_keys = [key for report in reports for key in report]
    assert len(new_keys) == SHARED_KEYS
    assert set(new_keys) == set(page_keys(SHARED_KEYS))


def test_redis_without_bloom_module_gives_the_fix() -> None:
    with RedisServer(bloom=False) as server:
        client = redis_from_url(server.url)
        with pytest.raises(RedisSetupError, match=r"no Bloom module: .*--loadmodule"):
            require_bloom(client)  # what the shared frontier checks before building its filter
        client.close()


def test_unreachable_redis_is_a_clear_error() -> None:
    with RedisServer(bloom=False) as server:
        url = server.url
    client = redis_from_url(url, retry=None)  # workers retry ~15 s first; the message is the same
    with pytest.raises(RedisSetupError, match=r"cannot reach Redis at redis://127\.0\.0\.1"):
        require_bloom(client)
    client.close()


def test_key_of_another_type_is_refused(redis_client: redis.Redis) -> None:
    redis_client.set("{books}:seen", "something else")
    with pytest.raises(
        RedisSetupError,
        match="holds a string, not a Bloom filter: set FRONTIER_KEY_PREFIX to another name",
    ):
        RedisBloomSeenFilter(redis_client, "{books}:seen", 1000, 0.001)
    assert redis_client.get("{books}:seen") == b"something else"


def test_password_from_the_url() -> None:
    password = "p@ss word/:1"
    with RedisServer(password=password) as server:
        seen = open_filter(server.url)
        assert seen.add_many(page_keys(2)) == [True, True]
        seen.client.close()
        with pytest.raises(redis.AuthenticationError):
            redis_from_url(f"redis://127.0.0.1:{server.port}/0").ping()


def test_tls_with_rediss_url(tmp_path: Path) -> None:
    tls = make_tls_files(tmp_path)
    with RedisServer(tls=tls) as server:
        assert server.url.startswith("rediss://")
        url = f"{server.url}?ssl_ca_certs={tls.ca}"
        seen = open_filter(url)
        assert seen.add_many(page_keys(2)) == [True, True]
        seen.client.close()
        # The same port refuses plain connections, so the data above did travel over TLS.
        plain = redis_from_url(f"redis://127.0.0.1:{server.port}/0", retry=None)
        with pytest.raises(redis.ConnectionError):
            plain.ping()


def test_reserves_the_configured_size(redis_url: str) -> None:
    seen = open_filter(redis_url, SEEN_FILTER_CAPACITY=5000, SEEN_FILTER_EXPANSION=4)
    seen.add_many(page_keys(100))
    (info,) = seen.info()
    assert info is not None
    assert (info.capacity, info.items_inserted, info.filters, info.expansion) == (5000, 100, 1, 4)
    # -ln(0.001) / ln(2)^2 bits per key, halved error rate for the first of the scaling filters.
    assert 5000 * 1.7 < info.size_bytes < 5000 * 2.2
    seen.add_many(page_keys(6000, site="example.org"))
    (grown,) = seen.info()
    assert grown is not None
    assert (grown.capacity, grown.filters) == (5000 + 20000, 2)
    seen.client.close()


def test_existing_filter_with_other_error_rate_is_kept_with_a_warning(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    first = open_filter(redis_url)
    first.add_many(page_keys(5))
    with caplog.at_level(logging.WARNING, logger="bloom_frontier.seen.redis"):
        second = open_filter(redis_url, SEEN_FILTER_ERROR_RATE=0.01)
    assert "{'error_rate': 0.001}; settings say {'error_rate': 0.01}" in caplog.text
    assert second.add_many(page_keys(5)) == [False] * 5
    for seen in (first, second):
        seen.client.close()


def test_same_settings_do_not_warn(redis_url: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="bloom_frontier.seen.redis"):
        for _worker in range(2):
            open_filter(redis_url).client.close()
    assert caplog.records == []


def test_lost_filter_comes_back_with_configured_parameters(
    redis_url: str, redis_client: redis.Redis
) -> None:
    seen = open_filter(redis_url, SEEN_FILTER_CAPACITY=5000)
    seen.add_many(page_keys(5))
    redis_client.flushall()  # e.g. a Redis restarted without persistence
    assert seen.info() == [None]
    assert seen.add_many(page_keys(5)) == [True] * 5
    (info,) = seen.info()
    assert info is not None
    assert (info.capacity, info.items_inserted) == (5000, 5)
    seen.client.close()


def test_worker_survives_a_redis_restart() -> None:
    with RedisServer(appendonly=True) as server:
        seen = open_filter(server.url)
        before = page_keys(10)
        assert seen.add_many(before) == [True] * 10
        server.kill()
        restarter = threading.Timer(1.0, server.start)
        restarter.start()
        after = page_keys(10, site="example.org")
        # Blocks, retrying, until the server is back; the AOF kept the keys added before.
        assert seen.add_many(before + after) == [False] * 10 + [True] * 10
        restarter.join()
        seen.client.close()


def test_batch_whose_reply_is_lost_still_reports_its_new_keys(redis_url: str) -> None:
    seen = RedisBloomSeenFilter(
        redis_from_url(redis_url, socket_timeout=0.3), "books:seen", 1000, 0.001
    )
    stall = redis_from_url(redis_url)
    # Redis sleeps, then runs the batch; the client has given up waiting and sends it again.
    stalling = threading.Thread(target=stall.execute_command, args=("DEBUG", "SLEEP", "0.5"))
    stalling.start()
    time.sleep(0.05)
    started = time.monotonic()
    assert seen.add_many(page_keys(3)) == [True] * 3
    assert time.monotonic() - started > 0.3  # the first reply really was lost
    stalling.join()
    assert seen.add_many(page_keys(3)) == [False] * 3
    seen.client.close()
    stall.close()
