"""The crawl summary counts as documents what the spider got (issue 24, item 9): a response
refused for its size, whether its download was cancelled (``Content-Length`` past
``DOWNLOAD_MAXSIZE``) or its body dropped once decompressed past it, is no document
fetched (before, the decompressed one was counted: Scrapy's downloader counts its 200)."""

from __future__ import annotations

import gzip
import re
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.crawls import ROOT, site_crawl_command

MAXSIZE = 1_000_000
PAGES: dict[str, tuple[bytes, str | None]] = {
    "/": (b'<a href="/bomb">a</a> <a href="/huge">b</a> <a href="/ok">c</a>', None),
    "/ok": (b"<p>a small page</p>", None),
    # 3 MB once decompressed, 3 KB on the wire: dropped by HttpCompressionMiddleware.
    "/bomb": (gzip.compress(b"<p>" + b"a" * 3_000_000 + b"</p>"), "gzip"),
    # Longer than DOWNLOAD_MAXSIZE as sent: the download is cancelled.
    "/huge": (b"<p>" + b"a" * (MAXSIZE + 1000) + b"</p>", None),
}


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body, encoding = PAGES.get(self.path, (b"", None))
        self.send_response(200 if self.path in PAGES else 404)
        self.send_header("Content-Type", "text/html")
        if encoding:
            self.send_header("Content-Encoding", encoding)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""


@pytest.fixture
def site() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_responses_refused_for_their_size_are_no_documents(site: str, tmp_path: Path) -> None:
    done = subprocess.run(
        site_crawl_command(
            f"{site}/", tmp_path / "store.sqlite", "-s", f"DOWNLOAD_MAXSIZE={MAXSIZE}"
        ),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "exceeded DOWNLOAD_MAXSIZE" in done.stderr  # the bomb was refused, by Scrapy
    fetched = re.search(r"documents fetched:\s+(\d+)", done.stderr)
    assert fetched is not None, done.stderr[-3000:]
    assert int(fetched[1]) == 2  # / and /ok
