"""The daemon's lake work never runs on its event loop: a transaction spilled past the memory
budget (its spill files, its landing read back from them), XA PREPARE/COMMIT/ROLLBACK (the
staged parts written, read back, deleted) and the row groups small commits fill (their part
file opened) run on the sink worker's thread, on a real server's stream — and the lake holds
exactly what the server committed. (A spilled transaction's
discard, which a binlog shows only after a reconnect, is proven without a server in
``tests/unit/test_sink_io_off_the_loop.py``.)"""

from __future__ import annotations

import functools
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sinks.parquet import buffer, parts, writer, xastore
from tests.servers.handle import ServerHandle

from .daemon_process import binlog_end, catch_up, catch_up_config
from .workload import read_lake

pytestmark = pytest.mark.server

ROWS = 3000  # rows of the big transaction: ~300 KiB of Arrow, over the 64 KiB budget
SMALL = 300  # one-row transactions before it: ~75 KiB, in row groups of 16 KiB


def _recorded(calls: list[tuple[str, bool]], name: str, fn: Callable[..., Any],
              touches_disk: Callable[[Any], bool]) -> Callable[..., Any]:
    """``fn``, noting each call that touches the disk (``touches_disk`` of its first argument)
    and whether it ran on the main thread (the event loop's)."""
    @functools.wraps(fn)
    def call(self: Any, arg: Any, *args: Any, **kwargs: Any) -> Any:
        if touches_disk(arg):
            calls.append((name, threading.current_thread() is threading.main_thread()))
        return fn(self, arg, *args, **kwargs)
    return call


async def test_spills_and_xa_files_are_written_on_the_sink_worker(
        mariadb_10_11: ServerHandle, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server = mariadb_10_11
    calls: list[tuple[str, bool]] = []
    monkeypatch.setattr(writer, "SinkOptions",
                        functools.partial(writer.SinkOptions, memory_limit_bytes=64 * 1024,
                                          row_group_bytes=16 * 1024))
    always = lambda arg: True  # noqa: E731
    for cls, name, touches_disk in (
            (buffer.TransactionBuffer, "_spill", always),
            (buffer.TransactionBuffer, "drain", lambda table: table.spill_writer is not None),
            (buffer.TransactionBuffer, "discard", lambda txn: txn.spilled),
            (xastore.XaStore, "prepare", always), (xastore.XaStore, "commit", always),
            (xastore.XaStore, "rollback", always), (parts.PartWriter, "_open_file", always)):
        monkeypatch.setattr(cls, name, _recorded(calls, name, getattr(cls, name),
                                                 touches_disk))
    db = f"io_{uuid.uuid4().hex[:8]}"
    start = binlog_end(server)
    rows = (f"WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {ROWS}) "
            "SELECT i{plus}, REPEAT('x', 100) FROM n")
    server.sql(
        f"SET SESSION max_recursive_iterations = {ROWS * 2}; "
        f"CREATE DATABASE {db}; CREATE TABLE {db}.t (id INT PRIMARY KEY, v VARCHAR(200)) "
        "ENGINE=InnoDB;"
        + "".join(f"INSERT INTO {db}.t VALUES ({ROWS + i}, REPEAT('y', 150));"  # row groups
                  for i in range(1, SMALL + 1))
        + f"INSERT INTO {db}.t {rows.format(plus='')};"  # spilled, landed
        f"XA START 'a'; INSERT INTO {db}.t VALUES (-1, 'prepared'); XA END 'a'; "
        "XA PREPARE 'a'; XA COMMIT 'a';"
        f"XA START 'b'; INSERT INTO {db}.t VALUES (-2, 'gone'); XA END 'b'; XA PREPARE 'b'; "
        "XA ROLLBACK 'b';"
        f"INSERT INTO {db}.t VALUES (-3, 'last')")
    await catch_up(catch_up_config(server, tmp_path / "lake", start, include=(db,)))

    landed = sorted(r["id"] for r in read_lake(tmp_path / "lake", db).rows["t"])
    expected = sorted(int(r[0] or 0) for r in server.sql(f"SELECT id FROM {db}.t"))
    assert landed == expected == [-3, -1, *range(1, ROWS + SMALL + 1)]
    names = {name for name, _ in calls}
    assert names == {"_spill", "drain", "prepare", "commit", "rollback", "_open_file"}, names
    assert [call for call in calls if call[1]] == []  # none on the event loop's thread
