"""The flush policy through ``binlake run``: a backlog lands by size, not by time (one file per
table, however many tables and flush intervals it takes); once the stream is caught up, a new
change lands within ``lake.flush_interval`` again: the cost must not grow with the number of tables."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from tests.servers.handle import ServerHandle

from .daemon_process import (
    DaemonProcess,
    binlog_end,
    daemon_settings,
    http_get,
    metric,
    read_checkpoint,
    unique_db,
)
from .proxy import TcpProxy
from .workload import read_lake

pytestmark = pytest.mark.server

TABLES = int(os.environ.get("BINLAKE_CATCH_UP_TABLES", "40"))
TRANSACTIONS = int(os.environ.get("BINLAKE_CATCH_UP_TRANSACTIONS", "3000"))  # five rows each
FLUSH_INTERVAL = 0.15  # a backlog of TRANSACTIONS takes many of these even on a quiet machine


def _parquet_files(lake: Path, db: str) -> dict[str, int]:
    """Data files per table (visible ones: no ``_``/``.`` directory on the way)."""
    counts: dict[str, int] = {}
    root = lake / db
    for path in root.rglob("*.parquet"):
        parts = path.relative_to(root).parts
        if not any(part[0] in "_." for part in parts):
            counts[parts[0]] = counts.get(parts[0], 0) + 1
    return counts


def _flushes(daemon: DaemonProcess) -> float | None:
    _, text = http_get(daemon.metrics_url() + "/metrics")
    return metric(text, "binlake_land_duration_seconds_count")


def _wait_landed(lake: Path, end: tuple[str, int], timeout: float) -> float:
    """Seconds until the lake's checkpoint reaches ``end``."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        checkpoint = read_checkpoint(lake)
        if checkpoint is not None and (checkpoint["binlog_file"], checkpoint["binlog_pos"]) == end:
            return time.monotonic() - started
        time.sleep(0.02)
    raise AssertionError(f"the lake did not reach {end} within {timeout} s: {read_checkpoint(lake)}")


def test_backlog_lands_by_size_then_changes_land_within_flush_interval(
        mariadb_10_11: ServerHandle, tmp_path: Path) -> None:
    server = mariadb_10_11
    db = unique_db("catchup")
    server.sql(f"CREATE DATABASE {db};" + "".join(
        f"CREATE TABLE {db}.t{i:03d} (id INT PRIMARY KEY, v VARCHAR(40));"
        for i in range(TABLES)))
    lake = tmp_path / "lake"
    settings = daemon_settings(server, lake, db, overrides={
        "lake": {"flush_interval": FLUSH_INTERVAL}})
    statements = []
    for txn in range(TRANSACTIONS):
        values = ",".join(f"({txn * 5 + k}, 'row {txn * 5 + k}')" for k in range(5))
        statements.append(f"INSERT INTO {db}.t{txn % TABLES:03d} VALUES {values};")
    for low in range(0, len(statements), 1000):
        server.sql("\n".join(statements[low:low + 1000]))
    backlog_end = binlog_end(server)

    daemon = DaemonProcess(tmp_path, settings, password=server.users["repl"].password)
    daemon.start()
    try:
        seconds = _wait_landed(lake, backlog_end, timeout=180)
        # the premise: catching up took many flush intervals, none of which may flush by time
        assert seconds > 3 * FLUSH_INTERVAL, f"caught up in {seconds:.2f} s: backlog too small"
        assert _parquet_files(lake, db) == {f"t{i:03d}": 1 for i in range(TABLES)}
        assert _flushes(daemon) == 1.0
        rows = read_lake(lake, db).rows
        assert sum(len(r) for r in rows.values()) == 5 * TRANSACTIONS

        # caught up: a new change lands within the flush interval (plus a tick, half of it,
        # at most; and slack for a busy machine), in a file of its own
        server.sql(f"INSERT INTO {db}.t000 VALUES (-1, 'live')")
        live_end = binlog_end(server)
        started = time.monotonic()
        _wait_landed(lake, live_end, timeout=30)
        waited = time.monotonic() - started
        assert waited < 1.5 * FLUSH_INTERVAL + 1.0, f"landed {waited:.2f} s after its commit"
        files = _parquet_files(lake, db)
        assert files["t000"] == 2
        assert sum(files.values()) == TABLES + 1
        assert _flushes(daemon) == 2.0
    finally:
        code, _ = daemon.terminate(30)
    assert code == 0, daemon.stderr()[-3000:]


PROGRESS_TRANSACTIONS = int(os.environ.get("BINLAKE_CATCH_UP_PROGRESS_TRANSACTIONS", "25000"))


def test_the_first_progress_line_of_a_backlog_shows_decoded_work(
        mariadb_10_11: ServerHandle, tmp_path: Path) -> None:
    """A backlog lands by size, and by time only every lake.catch_up_flush_interval (60 s):
    the first progress line (log.progress_interval, 10 s) already shows transactions and rows
    decoded, bytes read and what is buffered, while the metrics count only what is durable."""
    server = mariadb_10_11
    db = unique_db("progress")
    server.sql(f"CREATE DATABASE {db}; CREATE TABLE {db}.t (id INT PRIMARY KEY, v VARCHAR(400))")
    start = binlog_end(server)
    statements = [f"INSERT INTO {db}.t VALUES ({n}, REPEAT('x', 300));"
                  for n in range(PROGRESS_TRANSACTIONS)]
    for low in range(0, len(statements), 2500):
        server.sql("\n".join(statements[low:low + 2500]))
    backlog = binlog_end(server)[1] - start[1]
    with TcpProxy("127.0.0.1", server.port) as proxy:
        # a distant server: reading the backlog takes longer than the first progress line
        proxy.throttle(backlog / 25)
        settings = daemon_settings(server, tmp_path / "lake", db, port=proxy.port, overrides={
            "start": {"from": "file", "file": start[0], "pos": start[1]},
            "log": {"progress_interval": 10.0}})
        daemon = DaemonProcess(tmp_path, settings, password=server.users["repl"].password)
        started = time.monotonic()
        daemon.start()
        try:
            first = daemon.wait_for(
                r"INFO +binlake\.daemon: (catching up|caught up)[^\n]*", timeout=20)
            seen_after = time.monotonic() - started
            _, text = http_get(daemon.metrics_url() + "/metrics")
            line = first.group(0)
            decoded = re.search(r"landed; (\d+) transactions and (\d+) rows decoded, ([\d.]+) "
                                r"(KiB|MiB) read; (\d+) transactions \(([\d.]+ [KM]iB)\) "
                                r"buffered, landing in ([\d.]+ s|\d+ min \d+ s) or once a "
                                r"table holds 64\.0 MiB", line)
            assert "catching up: 0 transactions and 0 rows landed" in line, line
            assert decoded is not None, line
            assert int(decoded.group(1)) > 0 and int(decoded.group(2)) > 0, line
            assert int(decoded.group(5)) > 0, line
            assert seen_after <= 10.0 + 5.0, f"first line {seen_after:.1f} s after the start"
            assert metric(text, "binlake_transactions_total") == 0.0  # durable work only
            daemon.wait_for(rf"caught up with the server: {PROGRESS_TRANSACTIONS} transactions "
                            rf"and {PROGRESS_TRANSACTIONS} rows landed", timeout=180)
            _, text = http_get(daemon.metrics_url() + "/metrics")
            assert metric(text, "binlake_transactions_total") == PROGRESS_TRANSACTIONS
        finally:
            code, _ = daemon.terminate(30)
    assert code == 0, daemon.stderr()[-3000:]
    print(f"first progress line after {seen_after:.1f} s: {line}")
