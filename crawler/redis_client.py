"""Redis connections for workers: one helper so every component connects the same way.

``REDIS_URL`` picks the deployment: ``redis://`` / ``rediss://`` (TLS) for one Redis server,
``redis+cluster://`` / ``rediss+cluster://`` for a Redis Cluster (any node's address; the
client discovers the others and follows slot moves).

Workers must outlive a Redis restart, so clients retry connection errors and timeouts
(including "loading the dataset") with exponential backoff, at least 15 s of downtime before
giving up, and check idle connections before use. A refused password is not retried.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit

import redis
from redis.backoff import ExponentialWithJitterBackoff
from redis.connection import parse_url
from redis.retry import Retry

#: Seconds to wait for a reply; generous because one batch command may carry thousands of keys.
SOCKET_TIMEOUT = 10.0
SOCKET_CONNECT_TIMEOUT = 5.0
#: Idle connections older than this many seconds are PINGed before being reused.
HEALTH_CHECK_INTERVAL = 15
#: Retries after a ConnectionError/TimeoutError, waiting 0.05 s, 0.1 s, ... up to 2 s each.
RETRIES = 12
BACKOFF_BASE = 0.05
BACKOFF_CAP = 2.0
#: A command (``scrapy seed``, ``scrapy frontier``, the checks before ``scrapy crawl``) answers
#: within 10 s when a server does not: short timeouts (the TLS handshake runs under the socket
#: timeout), one retry of a dropped connection, none of a timeout (a server that did not
#: answer in 2 s is reported, not waited for again).
COMMAND_CONNECT_TIMEOUT = 2.0
COMMAND_SOCKET_TIMEOUT = 2.0
COMMAND_RETRIES = 1
#: URL schemes REDIS_URL may use.
SCHEMES = ("redis", "rediss", "unix", "redis+cluster", "rediss+cluster")


def text(reply: bytes | str) -> str:
    """A Redis reply as text, whether or not the client decodes responses."""
    return reply.decode() if isinstance(reply, bytes) else reply


T = TypeVar("T")


class _Permanent(Exception):
    """Carries an error that no retry can fix past redis-py's retry loop."""

    def __init__(self, error: redis.AuthenticationError) -> None:
        super().__init__(error)
        self.error = error


class _RetryTransient(Retry):
    """redis-py's Retry, except for a refused password: AuthenticationError is a subclass of
    ConnectionError, so plain Retry would wait minutes before reporting it."""

    def call_with_retry(
        self, do: Callable[[], T], fail: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> T:
        def attempt() -> T:
            try:
                return do()
            except redis.AuthenticationError as error:
                raise _Permanent(error) from error

        try:
            return super().call_with_retry(attempt, fail, *args, **kwargs)
        except _Permanent as permanent:
            raise permanent.error from None


#: URL schemes of a Redis Cluster, and the plain scheme each stands for.
CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}

#: A client of one server or of a cluster: both answer the same commands.
Client = redis.Redis | redis.RedisCluster


class RedisSetupError(RuntimeError):
    """Redis is reachable but cannot serve the crawl (e.g. no Bloom module); says the fix."""


#: How a REDIS_URL is written, for the messages that refuse one.
URL_FORM = (
    "redis://host:port/db (rediss:// for TLS, redis+cluster://host:port for a cluster, "
    "unix:///path/redis.sock; a user and password go before the host as user:password@)"
)


def url_problem(url: str) -> str | None:
    """What is wrong with ``url`` as a ``REDIS_URL`` (ending with how one is written), or
    None. Never quotes the user or password part, even when a ``/`` in an unencoded
    password makes the URL split there."""
    scheme, separator, rest = url.partition("://")
    if not separator or scheme not in SCHEMES:
        return (
            f"must start with {', '.join(s + '://' for s in SCHEMES)}, not {scheme[:20]}://"
            if separator
            else f"is not a URL: use {URL_FORM}"
        )
    authority = rest.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
    if "@" in rest.split("?", 1)[0] and "@" not in authority:
        return (
            "has a user or password holding '/', '?' or '#': percent-encode them there "
            f"(%2F, %3F, %23); use {URL_FORM}"
        )
    host = authority.rpartition("@")[2]
    plain = CLUSTER_SCHEMES.get(scheme, scheme)
    try:
        parts = urlsplit(f"{plain}://{rest}")
        port = parts.port
    except ValueError:
        if host.startswith("[") and "]" not in host:
            return f"has an IPv6 address without its closing ']' ({host!r}): use {URL_FORM}"
        port_text = host.rpartition("]")[2].rpartition(":")[2]
        return f"has a port that is not a number from 1 to 65535 ({port_text!r}): use {URL_FORM}"
    if port == 0:
        return f"has port 0: use a port from 1 to 65535 in {URL_FORM}"
    database = unquote(parts.path).strip("/")
    if plain != "unix" and database and not database.isdigit():
        return f"names database {database!r}, not a number: use {URL_FORM}"
    if scheme in CLUSTER_SCHEMES and database not in ("", "0"):
        return f"names database {database} of a cluster, which has only database 0"
    try:
        parse_url(f"{plain}://{rest}")
    except ValueError as error:  # a query argument redis-py refuses; says which, not its value
        return f"is refused by redis-py: {error}"
    return None


def redis_from_url(url: str, **options: object) -> Client:
    """A client for ``redis://[[user]:password@]host:port/db`` or ``rediss://`` (TLS), or a
    cluster client for ``redis+cluster://`` / ``rediss+cluster://`` (database 0 only).

    Passwords may be percent-encoded in the URL; TLS options can be given as URL query
    arguments (``?ssl_cert_reqs=none``, ``?ssl_ca_certs=/path/ca.pem``) or ``options``,
    which override the defaults here.
    """
    if problem := url_problem(url):
        raise RedisSetupError(f"REDIS_URL {problem}")
    scheme, _, rest = url.partition("://")
    defaults: dict[str, object] = {
        "socket_timeout": SOCKET_TIMEOUT,
        "socket_connect_timeout": SOCKET_CONNECT_TIMEOUT,
        "socket_keepalive": True,
        "health_check_interval": HEALTH_CHECK_INTERVAL,
        "retry": _RetryTransient(
            ExponentialWithJitterBackoff(cap=BACKOFF_CAP, base=BACKOFF_BASE),
            RETRIES,
            supported_errors=(redis.ConnectionError, redis.TimeoutError, TimeoutError),
        ),
        "retry_on_error": [redis.ConnectionError, redis.TimeoutError],
    }
    if scheme in CLUSTER_SCHEMES:
        # Per-node settings the cluster client does not take (it checks nodes itself).
        for name in ("health_check_interval", "retry_on_error"):
            defaults.pop(name)
        return redis.RedisCluster.from_url(
            f"{CLUSTER_SCHEMES[scheme]}://{rest}", **{**defaults, **options}
        )
    return redis.Redis.from_url(url, **{**defaults, **options})


def command_client(url: str) -> Client:
    """A client for a command: :func:`redis_from_url` with the command timeouts, so that a
    server that does not answer is reported in seconds, not minutes."""
    options: dict[str, object] = {
        "socket_connect_timeout": COMMAND_CONNECT_TIMEOUT,
        "socket_timeout": COMMAND_SOCKET_TIMEOUT,
        "retry": _RetryTransient(
            ExponentialWithJitterBackoff(cap=0.2, base=BACKOFF_BASE),
            COMMAND_RETRIES,
            supported_errors=(redis.ConnectionError,),
        ),
    }
    if url.partition("://")[0] not in CLUSTER_SCHEMES:
        options["retry_on_error"] = [redis.ConnectionError]
    return redis_from_url(url, **options)


def describe(client: Client) -> str:
    """``scheme://host:port/db`` of a client, for messages (never the password)."""
    if isinstance(client, redis.RedisCluster):
        node = client.get_default_node()
        ssl = node.redis_connection.connection_pool.connection_class is redis.SSLConnection
        return f"{'rediss' if ssl else 'redis'}+cluster://{node.host}:{node.port}"
    kwargs = client.connection_pool.connection_kwargs
    scheme = "rediss" if client.connection_pool.connection_class is redis.SSLConnection else "redis"
    if "path" in kwargs:
        return f"unix://{kwargs['path']}"
    host, port, db = kwargs.get("host", "localhost"), kwargs.get("port", 6379), kwargs.get("db", 0)
    return f"{scheme}://{host}:{port}/{db}"


def require_bloom(client: Client, probe_key: str = "crawler:bloom-probe") -> None:
    """Raise :class:`RedisSetupError` naming the fix if the server has no ``BF.*`` commands.

    ``probe_key`` is never created; give one under the crawl's prefix, so that a Redis user
    limited to the crawl's keys (docs/security.md) may probe it."""
    try:
        # BF.EXISTS on a key that does not exist answers 0 and creates nothing.
        client.execute_command("BF.EXISTS", probe_key, "probe")
    except redis.AuthenticationError:
        raise
    except redis.TimeoutError as exc:
        raise RedisSetupError(
            f"Redis at {describe(client)} did not answer in time ({exc}): check REDIS_URL's "
            "host and port (rediss:// needs a TLS port)"
        ) from None
    except redis.ConnectionError as exc:
        raise RedisSetupError(
            f"cannot reach Redis at {describe(client)}: {exc} (is it running? check "
            "REDIS_URL; rediss:// needs a TLS port)"
        ) from None
    except redis.ResponseError as exc:
        if "unknown command" not in str(exc).lower():
            raise
        raise RedisSetupError(
            f"Redis at {describe(client)} has no Bloom module: use Redis 8, Redis Stack, or "
            "start redis-server with --loadmodule /path/redisbloom.so"
        ) from None
