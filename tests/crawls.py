"""How tests start the project's ``site`` spider in a process of its own."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: The virtualenv's running the tests (``make test-min`` runs them in another).
SCRAPY = str(Path(sys.executable).parent / "scrapy")


def site_crawl_command(start_url: str, store: Path, *args: str) -> list[str]:
    """``scrapy crawl site`` from ``start_url`` into the SQLite file ``store``, then
    ``args`` (``-s NAME=VALUE`` ...); run it with ``cwd=ROOT``."""
    return [
        SCRAPY, "crawl", "site", "-a", f"start_url={start_url}",
        "-s", f"STORE_URL=sqlite:///{store}", *args,
    ]  # fmt: skip
