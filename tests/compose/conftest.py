"""The stack's tests run only when asked for, ``make test-compose`` (``pytest -m compose``):
they start Docker's engine and build images, which the rest of the suite never needs."""

from __future__ import annotations

from pathlib import Path

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "compose: the docker-compose stack under a real engine")


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Left out of a run that does not select ``-m compose`` (``make test``'s)."""
    return True if "compose" not in (config.getoption("markexpr") or "") else None
