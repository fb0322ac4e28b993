"""A snapshot beside an XA transaction prepared before it started, on real servers.

The daemon streams an ``XA PREPARE`` (its rows kept durable in the lake, invisible) and is
killed -9; ``binlake snapshot`` then resumes the stream from the lake and snapshots the table.
The interleaving is forced through a proxy: right after the first chunk's ``SELECT`` (which
cannot see the prepared rows) and before its high watermark, the test runs ``XA COMMIT`` —
so the stream lands the prepared rows before the chunk can land. On MySQL the daemon sends the
high watermark's ``SHOW BINARY LOG STATUS`` right behind the ``SELECT`` (pipelined); the proxy
holds it until the server has begun sending the ``SELECT``'s rows, so the read view exists
before the commit whatever the machine's load. (MariaDB: right before the first chunk's
consistent snapshot, whose binlog point is its high watermark.) The process never saw that
prepared part (its key log started after it), so the chunk must not land rows read before it
(it is discarded and read again): the lake replayed in ``(_seq, _row)`` order equals SELECT,
exactly once, no XA left in doubt.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.servers.handle import ServerHandle

from .daemon_process import DaemonProcess, read_checkpoint, unique_db
from .proxy import TcpProxy
from .snapshot_check import (
    latest_values,
    readable_through,
    reset_binlogs,
    snapshot_entries,
    snapshot_settings,
    wait_caught_up,
)
from .test_snapshot_command import _snapshot
from .workload import check_exactly_once, read_lake

pytestmark = pytest.mark.server

ROWS = 30
CHUNK = 10


@pytest.fixture(params=["mariadb_10_11", "mariadb_11_8", "mysql_9_7"])
def server(request: pytest.FixtureRequest) -> ServerHandle:
    handle: ServerHandle = request.getfixturevalue(request.param)
    return handle


def test_xa_prepared_before_a_restart_commits_while_a_chunk_waits(
        server: ServerHandle, tmp_path: Path) -> None:
    database = unique_db("snapxa")
    lake = tmp_path / "lake"
    xid = f"x{database[-8:]}"
    table = f"{database}.t"
    server.sql(f"CREATE DATABASE {database}; CREATE TABLE {table} (id INT PRIMARY KEY, "
               "v INT NOT NULL); INSERT INTO " + table + " VALUES "
               + ", ".join(f"({i}, 0)" for i in range(1, ROWS + 1)))
    reset_binlogs(server)
    with TcpProxy("127.0.0.1", server.port) as proxy:
        settings = snapshot_settings(server, lake, database, overrides={
            "start": {"from": "latest"}, "snapshot": {"chunk_rows": CHUNK}})
        readable_through(settings, server, proxy.port)
        daemon = DaemonProcess(tmp_path, settings, password=server.users["repl"].password)
        daemon.start()
        daemon.wait_for("streaming from")
        server.sql(f"XA START '{xid}'; UPDATE {table} SET v = v + 1 WHERE id IN (2, 5); "
                   f"DELETE FROM {table} WHERE id = 7; XA END '{xid}'; XA PREPARE '{xid}'")
        deadline = time.monotonic() + 30
        while len((read_checkpoint(lake) or {}).get("xa_prepared", [])) != 1:
            daemon.check_alive()
            assert time.monotonic() < deadline, read_checkpoint(lake)
            time.sleep(0.05)
        daemon.kill()  # between XA PREPARE and XA COMMIT

        committed = False

        def between_select_and_high_watermark(request: bytes, previous: bytes) -> None:
            nonlocal committed
            if committed:
                return
            if server.is_mariadb:
                # A chunk's binlog point is its read view's, taken before its SELECT: commit
                # just before the first one, so the point is after the XA COMMIT and the chunk
                # can only land once the stream has passed it (after it, the chunk's point
                # would precede the XA COMMIT and landing before it would be right too).
                server.sql(f"XA COMMIT '{xid}'")
                committed = True
            elif f"LIMIT {CHUNK}".encode() in previous and b"`t`" in previous:
                # the high watermark the daemon pipelines after the first chunk's SELECT: the
                # proxy holds it until the server has begun sending the SELECT's rows
                server.sql(f"XA COMMIT '{xid}'")
                committed = True

        marker = b"WITH CONSISTENT SNAPSHOT" if server.is_mariadb else b"SHOW BINARY LOG STATUS"
        proxy.before_request(marker, between_select_and_high_watermark)
        done = _snapshot(daemon, table)
        proxy.before_request(marker, None)
        assert done.returncode == 0, done.stderr
        assert committed
        assert "chunk discarded (XA COMMIT " in done.stderr
        assert " of rows prepared before the table's snapshot started)" in done.stderr
        daemon.start()  # streams on to the server's end
        daemon.wait_for("streaming from")
        wait_caught_up(server, lake, 60, daemon.check_alive)
        code, _ = daemon.terminate(20)
        assert code == 0, daemon.stderr()
    checkpoint = read_checkpoint(lake) or {}
    assert checkpoint.get("xa_prepared", []) == []
    entry = snapshot_entries(lake)[table]
    assert (entry["status"], entry["rows"], entry["chunks"]) == ("done", ROWS - 1, 3)
    changes = read_lake(lake, database)
    check_exactly_once(changes)
    rows = changes.rows["t"]
    assert [(r["_op"], r["id"], r["v"]) for r in rows if r["_op"] != "R"] == [
        ("U", 2, 1), ("U", 5, 1), ("D", 7, 0)]
    assert sorted(r["id"] for r in rows if r["_op"] == "R") == [
        i for i in range(1, ROWS + 1) if i != 7]
    expected = {int(i or 0): int(v or 0) for i, v in server.sql(f"SELECT id, v FROM {table}")}
    assert latest_values(rows, "id", "v") == expected
    assert expected[2] == expected[5] == 1 and 7 not in expected
