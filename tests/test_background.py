"""Blocking work stays off Twisted's loop: waits between retries are refused there, and a
record store used while the loop runs writes from its own thread."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from twisted.internet import reactor
from twisted.python import threadable

from bloom_frontier.background import BackgroundThread, pause_off_loop
from bloom_frontier.pipelines.writer import StoreWriter


@pytest.fixture
def loop_running(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if Twisted's loop ran in this thread."""
    monkeypatch.setattr(reactor, "running", True, raising=False)
    loop = threading.get_ident()
    monkeypatch.setattr(threadable, "isInIOThread", lambda: threading.get_ident() == loop)


@pytest.mark.usefixtures("loop_running")
def test_a_wait_between_retries_is_refused_on_the_loop_and_taken_elsewhere() -> None:
    with pytest.raises(RuntimeError, match="Twisted's loop"):
        pause_off_loop(0.01)
    errors: list[BaseException] = []

    def in_a_thread() -> None:
        try:
            pause_off_loop(0.01)
        except BaseException as exc:
            errors.append(exc)

    worker = threading.Thread(target=in_a_thread)
    worker.start()
    worker.join()
    assert errors == []


@pytest.mark.usefixtures("loop_running")
def test_a_store_used_while_the_loop_runs_writes_from_its_own_thread(tmp_path: Path) -> None:
    store = StoreWriter.from_url(f"sqlite:///{tmp_path / 'store.sqlite'}")
    assert store.background is None  # made outside a crawl: no thread of its own yet
    assert isinstance(store._thread, BackgroundThread)
    assert store._thread is store._thread
