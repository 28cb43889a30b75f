"""Throw-away nginx and Apache processes that load a redirect-map export, for tests.

Each runs Debian's binary (installed by :mod:`tests.services` when missing) on a free
loopback port with its own temporary config directory, never the system service. ``load``
writes the export next to a minimal config the way the export's header says to use it,
checks it (``nginx -t`` / ``apache2 -t``) and (re)starts the server on it; a config the
server refuses raises :class:`ConfigRefused` with the server's message.
"""

from __future__ import annotations

import http.client
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from tests.servers import Service, ServiceUnavailable, free_port
from tests.services import debian_tool

START_TIMEOUT = 20.0
#: What both servers answer for anything the map does not redirect.
FALLBACK_STATUS = 404


class ConfigRefused(RuntimeError):
    """The server's config test failed; the message is its output."""


def header_lines(export: str, prefix: str) -> list[str]:
    """The lines of ``export``'s header that start with ``# <prefix>: ``, without it."""
    marker = f"# {prefix}: "
    return [line[len(marker) :] for line in export.splitlines() if line.startswith(marker)]


def _run_user() -> tuple[str, str]:
    """User and group a server's workers switch to when started as root."""
    if os.geteuid() != 0:
        return "", ""
    return "nobody", "nogroup"


class _WebServer(Service):
    name = ""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix=f"{self.name}-test-"))
        self.port = free_port()
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> _WebServer:
        """Install the server if needed; it only runs once something is loaded."""
        self.binary = debian_tool(self.name)
        return self

    def _config(self, export: str) -> str:
        raise NotImplementedError

    def _test_command(self) -> list[str]:
        raise NotImplementedError

    def _run_command(self) -> list[str]:
        raise NotImplementedError

    def load(self, export: str) -> None:
        """Serve ``export`` (restarting on it) once the server's own config test passes."""
        self.stop()
        (self.dir / "map.conf").write_text(export, encoding="utf-8")
        (self.dir / "server.conf").write_text(self._config(export), encoding="utf-8")
        check = subprocess.run(self._test_command(), capture_output=True, text=True, check=False)
        if check.returncode != 0:
            raise ConfigRefused((check.stderr + check.stdout).strip())
        self._process = subprocess.Popen(
            self._run_command(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                detail = (
                    self._process.stderr.read().decode(errors="replace")
                    if self._process.stderr
                    else ""
                )
                raise ServiceUnavailable(f"{self.name} exited: {detail.strip()[-2000:]}")
            try:
                if self.get("/__alive").status == FALLBACK_STATUS:
                    return
            except OSError:
                time.sleep(0.05)
        raise ServiceUnavailable(f"{self.name} did not answer on port {self.port}")

    def get(self, target: str, host: str = "127.0.0.1") -> http.client.HTTPResponse:
        """``GET target`` (sent as is) with ``Host: host``; the response, body read."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            connection.putrequest("GET", target, skip_host=True, skip_accept_encoding=True)
            connection.putheader("Host", host)
            connection.endheaders()
            response = connection.getresponse()
            response.read()
            return response
        finally:
            connection.close()

    def stop(self) -> None:
        if self._process is None:
            return
        if self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(timeout=10)
        if self._process.stderr is not None:
            self._process.stderr.close()
        self._process = None

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class NginxServer(_WebServer):
    """nginx with the export included in ``http {}`` and its ``# server: `` lines in the
    site's ``server {}``, the ``# http: `` directives it states once in ``http {}``."""

    name = "nginx"

    def _config(self, export: str) -> str:
        user, group = _run_user()
        temp = self.dir / "temp"
        temp.mkdir(exist_ok=True)
        temps = "".join(
            f"    {kind}_temp_path {temp / kind};\n"
            for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
        )
        http_lines = "".join(f"    {line}\n" for line in header_lines(export, "http"))
        server_lines = "".join(f"        {line}\n" for line in header_lines(export, "server"))
        return (
            (f"user {user} {group};\n" if user else "") + "daemon off;\nworker_processes 1;\n"
            f"pid {self.dir / 'nginx.pid'};\nerror_log {self.dir / 'error.log'};\n"
            "events { worker_connections 64; }\n"
            "http {\n    access_log off;\n"
            + temps
            + http_lines
            + f"    include {self.dir / 'map.conf'};\n"
            "    server {\n"
            f"        listen 127.0.0.1:{self.port};\n"
            "        server_name _;\n"
            + server_lines
            + f'        location / {{ return {FALLBACK_STATUS} "not redirected\\n"; }}\n'
            "    }\n}\n"
        )

    def _test_command(self) -> list[str]:
        return [
            str(self.binary),
            "-t",
            "-q",
            "-p",
            str(self.dir),
            "-c",
            str(self.dir / "server.conf"),
        ]

    def _run_command(self) -> list[str]:
        return [str(self.binary), "-p", str(self.dir), "-c", str(self.dir / "server.conf")]


class ApacheServer(_WebServer):
    """Apache 2.4 (mpm_event, mod_rewrite) with the export included in the VirtualHost."""

    name = "apache2"
    modules = ("mpm_event", "authz_core", "rewrite")

    def _config(self, export: str) -> str:
        user, group = _run_user()
        modules = "".join(
            f"LoadModule {name}_module /usr/lib/apache2/modules/mod_{name}.so\n"
            for name in self.modules
        )
        return (
            modules
            + f"ServerRoot {self.dir}\nServerName 127.0.0.1\n"
            + (f"User {user}\nGroup {group}\n" if user else "")
            + f"PidFile {self.dir / 'apache.pid'}\nErrorLog {self.dir / 'error.log'}\n"
            f"Mutex file:{self.dir} default\nListen 127.0.0.1:{self.port}\n"
            f"DocumentRoot {self.dir}\n"
            f"<VirtualHost 127.0.0.1:{self.port}>\n"
            "    AllowEncodedSlashes On\n"
            f"    Include {self.dir / 'map.conf'}\n"
            f"    RewriteRule ^ - [R={FALLBACK_STATUS},L]\n"
            "</VirtualHost>\n"
        )

    def _test_command(self) -> list[str]:
        return [str(self.binary), "-t", "-d", str(self.dir), "-f", str(self.dir / "server.conf")]

    def _run_command(self) -> list[str]:
        return [*self._test_command()[:1], "-DFOREGROUND", *self._test_command()[2:]]
