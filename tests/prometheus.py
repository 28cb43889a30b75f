"""A throw-away Prometheus on loopback (Debian's ``prometheus``, installed by
:mod:`tests.services`), scraping the targets a test names, and its HTTP query API."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from tests.servers import ProcessService, ServiceUnavailable, free_port
from tests.services import debian_tool

READY_TIMEOUT = 60.0
#: Seconds between scrapes and rule evaluations: a short crawl is scraped many times.
INTERVAL = "1s"


class PrometheusServer(ProcessService):
    """Prometheus scraping ``targets`` (``host:port``) as the job ``job``, evaluating the
    alerting rules of ``rule_files``, with its data in a temporary directory."""

    def __init__(self, targets: list[str], rule_files: list[Path], job: str) -> None:
        super().__init__("prometheus-test-")
        self.targets = targets
        self.rule_files = rule_files
        self.job = job
        self.port: int | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _config(self) -> str:
        config = {
            "global": {"scrape_interval": INTERVAL, "evaluation_interval": INTERVAL},
            "rule_files": [str(path) for path in self.rule_files],
            "scrape_configs": [
                {"job_name": self.job, "static_configs": [{"targets": self.targets}]}
            ],
        }
        return json.dumps(config)  # JSON is YAML

    def start(self) -> PrometheusServer:
        binary = debian_tool("prometheus")
        self.port = free_port()
        config = self.dir / "prometheus.yml"
        config.write_text(self._config())
        self._spawn(
            [
                str(binary),
                f"--config.file={config}",
                f"--storage.tsdb.path={self.dir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ]
        )
        if not self._wait_until(self._ready, READY_TIMEOUT, pause=0.1):
            self.stop()
            detail = (self._stderr().strip().splitlines() or ["no output"])[-1]
            raise ServiceUnavailable(f"prometheus did not become ready: {detail}")
        return self

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as answer:
                return answer.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def api(self, path: str, **params: str) -> Any:
        """The ``data`` of ``/api/v1/<path>`` with ``params``."""
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=10) as answer:
            reply = json.load(answer)
        assert reply["status"] == "success", reply
        return reply["data"]

    def query(self, expression: str) -> dict[tuple[tuple[str, str], ...], float]:
        """An instant query: each series' labels (sorted pairs) and its value."""
        data = self.api("query", query=expression)
        return {
            tuple(sorted(series["metric"].items())): float(series["value"][1])
            for series in data["result"]
        }

    def scalar(self, expression: str) -> float:
        """The value of a query that answers one series (an aggregation)."""
        found = self.query(expression)
        assert len(found) == 1, (expression, found)
        return next(iter(found.values()))
