"""Time to first request: what ``scrapy crawl`` loads before its first page request that
the request does not need (``bench/speed.py`` measures the seconds)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from pathlib import Path

from tests.crawls import ROOT, site_crawl_command
from tests.httpserver import TestServer, html

PROBE = 'DOWNLOADER_MIDDLEWARES={"tests.start_up_probe.FirstRequestImports": 1}'


def test_numpy_is_loaded_after_the_first_request_and_the_page_is_still_fingerprinted(
    tmp_path: Path,
) -> None:
    """A one-page crawl: numpy is not imported when its page is requested; the page's
    fingerprints are stored all the same, and the crawl ends cleanly (the fingerprint,
    later than before, is written before the store closes)."""
    loaded, store = tmp_path / "loaded.json", tmp_path / "records.sqlite"
    with TestServer({"/": html(title="one page")}) as server:
        command = site_crawl_command(
            f"{server.url}/", store, "-s", "CLOSESPIDER_PAGECOUNT=1", "-s", PROBE
        )
        run = subprocess.run(
            command,
            cwd=ROOT,
            env={**os.environ, "START_UP_PROBE": str(loaded)},
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads(loaded.read_text()) == []
    with sqlite3.connect(store) as db:
        assert db.execute("SELECT count(content_hash) FROM pages").fetchone() == (1,)
    assert "shared-memory" not in run.stderr
