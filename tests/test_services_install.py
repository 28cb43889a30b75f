"""The test services helper installs Debian's nginx, apache2, chromium and tmux when missing, and
says in one line why it cannot (never a traceback, never a skip)."""

from __future__ import annotations

import subprocess

import pytest

from tests import services
from tests.servers import ServiceUnavailable


@pytest.fixture
def missing(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, ...]]:
    """Every tool missing; apt-get calls recorded instead of run."""
    calls: list[tuple[str, ...]] = []
    monkeypatch.setattr(services, "tool_path", lambda executable: None)
    monkeypatch.setattr(services.os, "geteuid", lambda: 0)
    monkeypatch.setattr(services.shutil, "which", lambda name, path=None: "/usr/bin/apt-get")

    def apt_get(*args: str) -> subprocess.CompletedProcess[str]:
        calls.append(args)
        return subprocess.CompletedProcess(args, 100, "", "E: Unable to locate package nginx\n")

    monkeypatch.setattr(services, "_apt_get", apt_get)
    return calls


def test_failed_install_updates_the_lists_once_then_says_why(missing: list) -> None:
    with pytest.raises(ServiceUnavailable) as caught:
        services.debian_tool("nginx")
    assert [call[0] for call in missing] == ["install", "update", "install"]
    message = str(caught.value)
    assert "\n" not in message
    assert "Unable to locate package nginx" in message
    assert "apt-get install -y nginx" in message


def test_not_root_is_a_clear_failure(missing: list, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(services.os, "geteuid", lambda: 1000)
    with pytest.raises(
        ServiceUnavailable, match="nginx, apache2, chromium, tmux missing and not root"
    ):
        services.ensure_debian_tools()
    assert missing == []
