"""The daemon's background compaction loop (``lake.compact_interval``), without servers: on a
lake on object storage its first run comes at start, a failed run is logged and retried, a
store's permanent refusal ends the loop (the daemon stops with exit 4), and a stop asks a
running compaction to stop and waits for it."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import trio

from replica.cli import exit_code_for
from replica.config import load_config
from replica.core import daemon as D
from sinks.errors import StoreRefused


def _daemon(lake: str) -> D.Daemon:
    config = load_config(None, env={
        "BINLAKE_CONFIG": "/dev/null", "BINLAKE_LAKE_PATH": lake,
        "BINLAKE_LAKE_COMPACT_INTERVAL": "3600", "BINLAKE_LAKE_S3_ENDPOINT": "http://127.0.0.1:9",
        "BINLAKE_REPLICA_SERVER_ID": "7"})
    return D.Daemon(config)


def test_on_object_storage_the_first_run_is_at_start_and_a_refusal_ends_the_loop(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    calls: list[tuple[str, Any, bool]] = []
    refused = StoreRefused("PUT If-None-Match", "s3://bucket/lake/_log/x", "403 AccessDenied",
                           fix="grant the key s3:PutObject on bucket")

    def compact(lake: str, options: Any, *, s3: Any, stop: Callable[[], bool]) -> Any:
        calls.append((lake, s3.endpoint, stop()))
        if len(calls) == 1:
            raise RuntimeError("a footer could not be read")
        raise refused

    monkeypatch.setattr(D, "compact_lake", compact)
    monkeypatch.setattr(D.trio, "sleep", _no_wait)
    daemon = _daemon("s3://bucket/lake")
    with caplog.at_level(logging.WARNING), pytest.raises(StoreRefused) as raised:
        trio.run(daemon._compact_in_background)
    assert raised.value is refused and exit_code_for(raised.value) == 4
    assert calls == [("s3://bucket/lake", "http://127.0.0.1:9", False)] * 2
    assert [r.getMessage() for r in caplog.records] == [
        "background compaction failed (retried in 3600 s): a footer could not be read"]


async def _no_wait(seconds: float) -> None:
    await trio.lowlevel.checkpoint()


def test_on_disk_the_loop_waits_an_interval_first(monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Any) -> None:
    waited: list[float] = []

    async def sleep(seconds: float) -> None:
        waited.append(seconds)
        raise _Stopped  # the daemon stops during the wait

    monkeypatch.setattr(D, "compact_lake", lambda *a, **k: pytest.fail("compacted at start"))
    monkeypatch.setattr(D.trio, "sleep", sleep)
    daemon = _daemon(str(tmp_path / "lake"))
    with pytest.raises(_Stopped):
        trio.run(daemon._compact_in_background)
    assert waited == [3600.0]


class _Stopped(Exception):
    pass


def test_a_stop_asks_the_running_work_to_stop_and_waits_for_it() -> None:
    finished = threading.Event()

    def work(stop: Callable[[], bool]) -> str:
        deadline = time.monotonic() + 30
        while not stop():
            assert time.monotonic() < deadline, "never asked to stop"
            time.sleep(0.01)
        time.sleep(0.2)  # removing what it wrote
        finished.set()
        return "stopped"

    async def main() -> None:
        with trio.move_on_after(0.3):
            await D._in_thread(work, wait_on_cancel=30.0)
        assert finished.is_set()  # the cancellation waited for the thread

    trio.run(main)


def test_a_daemon_stop_stops_a_running_compaction_at_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    asked = threading.Event()

    def compact(lake: str, options: Any, *, s3: Any, stop: Callable[[], bool]) -> Any:
        deadline = time.monotonic() + 30
        while not stop():
            assert time.monotonic() < deadline, "the stop never reached the compaction"
            time.sleep(0.01)
        asked.set()
        raise _Stopped

    monkeypatch.setattr(D, "compact_lake", compact)
    daemon = _daemon("s3://bucket/lake")

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(daemon._compact_in_background)
            await trio.sleep(0.2)
            daemon.stop()  # SIGTERM: before the daemon cancels its services
            await trio.to_thread.run_sync(asked.wait, 30)
            nursery.cancel_scope.cancel()

    trio.run(main)
    assert asked.is_set()


def test_a_compaction_that_does_not_stop_is_abandoned_after_the_wait(
        caplog: pytest.LogCaptureFixture) -> None:
    release = threading.Event()

    async def main() -> float:
        started = time.monotonic()
        with trio.move_on_after(0.1):
            await D._in_thread(lambda stop: release.wait(30), wait_on_cancel=0.3)
        return time.monotonic() - started

    with caplog.at_level(logging.WARNING):
        took = trio.run(main)
    release.set()
    assert 0.4 <= took < 5
    assert [r.getMessage() for r in caplog.records] == [
        "stopping with a background compaction still running after 0.3 s: the files it wrote "
        "are removed by the next compaction run"]
