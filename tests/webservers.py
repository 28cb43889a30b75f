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
import subprocess

from tests.servers import ProcessService, ServiceUnavailable, free_port
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


class _WebServer(ProcessService):
    name = ""

    def __init__(self) -> None:
        super().__init__(f"{self.name}-test-")
        self.port = free_port()

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
        self._spawn(self._run_command())
        if self._wait_until(self._answers, START_TIMEOUT, pause=0.05):
            return
        if not self.running:
            raise ServiceUnavailable(f"{self.name} exited: {self._stderr().strip()[-2000:]}")
        raise ServiceUnavailable(f"{self.name} did not answer on port {self.port}")

    def _answers(self) -> bool:
        """The server answers what the map does not redirect."""
        try:
            return self.get("/__alive").status == FALLBACK_STATUS
        except OSError:
            return False

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
