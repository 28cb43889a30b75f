"""Shared fixtures: a private RedisBloom server, the PostgreSQL test database, store URLs.

A missing service fails the test that needs it, with the reason, never skips: ``make test``
starts PostgreSQL (``python -m tests.services ensure``) and installs RedisBloom.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TypeVar

import psycopg
import pytest
import redis
from scrapy.utils.reactor import install_reactor

from bloom_frontier.settings import TWISTED_REACTOR
from tests.cluster import RedisClusterServers
from tests.servers import RedisServer, Service, ServiceUnavailable
from tests.webservers import ApacheServer, NginxServer

PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
PG_DSN = "host=127.0.0.1 port=5432 user=postgres dbname=test connect_timeout=3"


def pytest_configure(config: pytest.Config) -> None:
    """Install the reactor the project's crawls run on, before any test. Otherwise whether one
    is installed depends on the tests that ran before (the first ``from twisted.internet
    import reactor`` installs Twisted's default), and ``scrapy.utils.test.get_crawler`` builds
    a different crawler for each case: reactorless, with an asyncio-only download handler that
    fails outside a running loop, when no earlier test installed one."""
    install_reactor(TWISTED_REACTOR)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark tests by the services they use, so ``-m 'not postgres'`` works without tagging."""
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if "redis_bloom_server" in fixtures or "redis_cluster" in fixtures:
            item.add_marker(pytest.mark.redis)
        callspec = getattr(item, "callspec", None)
        store = callspec.params.get("store_url") if callspec else None
        if "pg_url" in fixtures or store == "postgresql":
            item.add_marker(pytest.mark.postgres)


ServiceT = TypeVar("ServiceT", bound=Service)


def serve(service: ServiceT, what: str) -> Iterator[ServiceT]:
    """A fixture's ``service``, started, then closed after its tests; one that cannot start
    fails the tests that need it, saying why."""
    try:
        service.start()
    except ServiceUnavailable as exc:
        service.close()
        pytest.fail(f"cannot start {what}: {exc}", pytrace=False)
    yield service
    service.close()


@pytest.fixture(scope="module")
def nginx() -> Iterator[NginxServer]:
    """One nginx for the module (installed first if missing); each test loads its export."""
    yield from serve(NginxServer(), "nginx")


@pytest.fixture(scope="module")
def apache() -> Iterator[ApacheServer]:
    """One Apache for the module (installed first if missing)."""
    yield from serve(ApacheServer(), "Apache")


@pytest.fixture(scope="session")
def redis_bloom_server() -> Iterator[RedisServer]:
    """One redis-server with RedisBloom for the whole session, on a free loopback port."""
    yield from serve(RedisServer(bloom=True), "redis-server with RedisBloom")


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisClusterServers]:
    """A 3-master Redis Cluster with RedisBloom for the whole session, on loopback."""
    yield from serve(RedisClusterServers(masters=3), "a Redis Cluster")


@pytest.fixture
def redis_url(redis_bloom_server: RedisServer) -> str:
    """URL of the session's RedisBloom server, emptied before the test."""
    with redis_bloom_server.client() as client:
        client.flushall()
    return redis_bloom_server.url


@pytest.fixture(scope="session")
def _postgres_available() -> str | None:
    """None if the test database answers, else why not."""
    try:
        with psycopg.connect(PG_DSN) as connection:
            connection.execute("SELECT 1")
    except psycopg.Error as exc:
        return f"PostgreSQL test database unavailable at 127.0.0.1:5432 ({exc}); " + (
            "run `python -m tests.services ensure`"
        )
    return None


@pytest.fixture
def pg_url(_postgres_available: str | None) -> Iterator[str]:
    """SQLAlchemy URL of the PostgreSQL database ``test``, in a fresh schema per test.

    The schema (first on ``search_path``) keeps tests, and concurrent test runs, from seeing
    each other's tables; it is dropped afterwards.
    """
    if _postgres_available:
        pytest.fail(_postgres_available, pytrace=False)
    schema = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_DSN, autocommit=True) as connection:
        connection.execute(f'CREATE SCHEMA "{schema}"')
    yield f"{PG_URL}?options=-csearch_path%3D{schema}"
    with psycopg.connect(PG_DSN, autocommit=True) as connection:
        connection.execute(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """SQLAlchemy URL of a new SQLite file in the test's temporary directory."""
    return f"sqlite:///{tmp_path / 'store.sqlite'}"


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest) -> str:
    """Each record-store backend in turn."""
    fixture = "pg_url" if request.param == "postgresql" else "sqlite_url"
    return request.getfixturevalue(fixture)


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    """A plain redis-py client of the (emptied) RedisBloom server."""
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture(autouse=True)
def store_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Crawls that do not name a store write to the test's own SQLite file, never to
    ``crawl.sqlite`` in the working tree (subprocesses inherit the environment)."""
    monkeypatch.setenv("STORE_URL", f"sqlite:///{tmp_path / 'default-store.sqlite'}")
