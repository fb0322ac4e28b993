"""What ``binlake run`` tells its operator, checked against what really happened on a real server.

* /metrics: exact transactions, rows per table and operation, semi-sync ACKs equal to the
  server's own count, a CRC failure injected by the proxy counted once (and the row landed
  once), decode and land time;
* semi-sync ``ack-after-land``: every COMMIT returns only once its row can be read from the lake;
* one lag: 0 and ready on an idle daemon (also after a server restart), > 0 while its stream is
  held and the server writes, the same figure in /readyz, /metrics and ``binlake status``;
* logs: catch-up progress lines and a stop summary with exact counts, one line when the
  connection is lost and one when it is back, no Python enum names, the fatal error as the last
  line of ``log.file``;
* ``lake.flush_interval`` below half a second is honoured (a row lands sooner than a fixed
  0.5 s tick would land it).

Private servers (``server_factory``) wherever the test counts transactions or restarts the server:
other tests' writes on a shared server would move the figures.
"""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from replica.cli import EXIT_PERMANENT
from tests.servers.handle import ServerHandle
from tests.servers.plugin import ServerFactory

from .daemon_process import (
    DaemonProcess,
    binlog_end,
    daemon_settings,
    http_get,
    metric,
    unique_db,
)
from .proxy import TcpProxy
from .workload import read_lake

pytestmark = pytest.mark.server

SEMI_SYNC_ARGS = ["--rpl-semi-sync-master-enabled=ON", "--rpl-semi-sync-master-timeout=30000"]
ENUM_REPR = re.compile(r"\b(?:StartFrom|SemiSyncMode|Disposition|RowsKind)\.[A-Z_]+\b")


def scrape(base: str) -> str:
    status, text = http_get(f"{base}/metrics")
    assert status == 200
    return text


def wait_until(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.1)


def wait_for_metric(base: str, name: str, value: float, timeout: float = 10.0) -> str:
    """Scrape until ``name`` equals ``value``; returns that scrape's text."""
    deadline = time.monotonic() + timeout
    while True:
        text = scrape(base)
        if metric(text, name) == value:
            return text
        if time.monotonic() > deadline:
            raise AssertionError(f"{name} is {metric(text, name)}, not {value}, after "
                                 f"{timeout} s")
        time.sleep(0.1)


def plain_server_table(server_factory: ServerFactory, prefix: str,
                       columns: str) -> tuple[ServerHandle, str]:
    """The private plain MariaDB 10.11 of this module, with a new database holding table ``t``."""
    server = server_factory.start("mariadb-10.11", name="ops-plain")
    database = unique_db(prefix)
    server.sql(f"CREATE DATABASE {database}; CREATE TABLE {database}.t ({columns})")
    return server, database


def status_vars(server: ServerHandle, *names: str) -> dict[str, int]:
    rows = server.sql("SHOW GLOBAL STATUS WHERE Variable_name IN ("
                      + ", ".join(f"'{n}'" for n in names) + ")")
    return {str(name): int(str(value)) for name, value in rows}


def binlake_status(daemon: DaemonProcess) -> dict[str, Any]:
    """``binlake status --json`` with the daemon's own configuration."""
    done = subprocess.run([sys.executable, "-m", "replica.cli", "status", "--json", "--config",
                           str(daemon.config_path)], env=daemon._env(), capture_output=True,
                          timeout=60, check=True)
    document: dict[str, Any] = json.loads(done.stdout)
    return document


def assert_caught_up_everywhere(daemon: DaemonProcess, base: str) -> None:
    """/readyz, /metrics and `binlake status` all say: caught up, 0 s and 0 bytes behind."""
    status, body = http_get(f"{base}/readyz")
    assert (status, body) == (200, "ready: connected, caught up (0 s behind the server)\n")
    text = scrape(base)
    assert metric(text, "binlake_lag_seconds") == 0
    assert metric(text, "binlake_lag_bytes") == 0
    assert metric(text, "binlake_ready") == 1
    server = binlake_status(daemon)["server"]
    assert (server["caught_up"], server["seconds_behind"], server["bytes_behind"]) == (
        True, 0.0, 0), server


def wait_caught_up(base: str, timeout: float = 20.0) -> None:
    wait_until(lambda: http_get(f"{base}/readyz")[1].endswith("caught up (0 s behind the "
                                                              "server)\n"),
               timeout, "the daemon is caught up")


# --- metrics and ack-after-land on a semi-sync server ------------------------------------------


def test_semi_sync_metrics_are_exact_and_each_commit_waits_for_the_lake(
        server_factory: ServerFactory, tmp_path: Path) -> None:
    server = server_factory.start("mariadb-10.11", SEMI_SYNC_ARGS, name="ops-semi-sync")
    database = unique_db("ops_ss")
    lake = tmp_path / "lake"
    settings = daemon_settings(server, lake, database, overrides={
        "semi_sync": {"mode": "ack-after-land"},
        "lake": {"flush_interval": 30.0},  # only the ACK can make a commit land this soon
    })
    before = status_vars(server, "Rpl_semi_sync_master_yes_tx", "Rpl_semi_sync_master_no_tx")
    daemon = DaemonProcess(tmp_path, settings, password=server.users["repl"].password)
    daemon.start()
    try:
        base = daemon.metrics_url()
        daemon.wait_for(r"streaming from")
        wait_until(lambda: status_vars(server, "Rpl_semi_sync_master_clients")[
            "Rpl_semi_sync_master_clients"] == 1, 20, "binlake is a semi-sync replica")
        server.sql(f"CREATE DATABASE {database}; "
                   f"CREATE TABLE {database}.t (id INT PRIMARY KEY, v VARCHAR(20)); "
                   f"CREATE TABLE {database}.u (id INT PRIMARY KEY)")
        for i in range(20):
            server.sql(f"INSERT INTO {database}.t VALUES ({i}, 'v{i}')")
            # the INSERT returned: the server had binlake's ACK, so the row is in the lake
            landed = {row["id"] for row in read_lake(lake, database).rows.get("t", [])}
            assert i in landed, f"INSERT {i} returned before its row was in the lake"
        server.sql(f"UPDATE {database}.t SET v = 'w' WHERE id < 5")
        server.sql(f"DELETE FROM {database}.t WHERE id >= 15")
        server.sql(f"BEGIN; INSERT INTO {database}.u VALUES (1), (2); "
                   f"INSERT INTO {database}.t VALUES (100, 'x'); COMMIT")
        transactions = 3 + 20 + 3  # DDL, the INSERTs, the rest
        text = wait_for_metric(base, "binlake_transactions_total", transactions)
        after = status_vars(server, "Rpl_semi_sync_master_yes_tx", "Rpl_semi_sync_master_no_tx")
        yes = after["Rpl_semi_sync_master_yes_tx"] - before["Rpl_semi_sync_master_yes_tx"]
        assert after["Rpl_semi_sync_master_no_tx"] == before["Rpl_semi_sync_master_no_tx"], \
            "a commit timed out waiting for binlake's ACK"
        assert yes == transactions
        assert metric(text, "binlake_semi_sync_acks_total") == yes
        expected = {("t", "insert"): 21, ("t", "update"): 5, ("t", "delete"): 5,
                    ("u", "insert"): 2, ("u", "update"): None, ("u", "delete"): None}
        for (table, op), count in expected.items():
            assert metric(text, "binlake_rows_total", database=database, table=table,
                          op=op) == count, (table, op)
        assert metric(text, "binlake_crc_failures_total") == 0
        assert (metric(text, "binlake_decode_seconds_total") or 0) > 0
        flushes = metric(text, "binlake_land_duration_seconds_count") or 0
        assert flushes >= yes  # each ACK waited for its own flush
        assert (metric(text, "binlake_land_duration_seconds_sum") or 0) > 0
        wait_caught_up(base)
        assert_caught_up_everywhere(daemon, base)
    finally:
        code, _took = daemon.terminate(timeout=15)
    assert code == 0, daemon.stderr()
    assert re.search(rf"stopped: {transactions} transactions and 33 rows landed in ",
                     daemon.stderr()), daemon.stderr()[-2000:]


def test_event_and_byte_counts_are_exact_over_a_burst(server_factory: ServerFactory,
                                                     tmp_path: Path) -> None:
    """A burst of one-row transactions reaches the daemon many events per read (decoded as
    batches): events by type and received bytes still count each event exactly once."""
    server, database = plain_server_table(server_factory, "ops_burst",
                                          "id INT PRIMARY KEY, v VARCHAR(20)")
    lake = tmp_path / "lake"
    settings = daemon_settings(server, lake, database, overrides={
        "replica": {"heartbeat_period": 30.0}})  # no heartbeat inside the measured span
    daemon = DaemonProcess(tmp_path, settings, password=server.users["repl"].password)
    daemon.start()
    try:
        base = daemon.metrics_url()
        daemon.wait_for(r"streaming from")
        server.sql(f"INSERT INTO {database}.t VALUES (0, 'first')")
        before_text = wait_for_metric(base, "binlake_transactions_total", 1)
        file, start = binlog_end(server)
        n = 300
        server.sql("\n".join(f"INSERT INTO {database}.t VALUES ({i}, 'v{i}');"
                              for i in range(1, n + 1)))
        # the bytes the dump sends: not the ANNOTATE_ROWS events (no one asked for them)
        sent = sum(int(str(row[4])) - int(str(row[1])) for row in server.sql(
            f"SHOW BINLOG EVENTS IN '{file}' FROM {start}") if row[2] != "Annotate_rows")
        end_file, _end = binlog_end(server)
        text = wait_for_metric(base, "binlake_transactions_total", 1 + n, timeout=30)
    finally:
        code, _took = daemon.terminate(timeout=15)
    assert code == 0, daemon.stderr()
    assert end_file == file

    def delta(name: str, **labels: str) -> float:
        return (metric(text, name, **labels) or 0) - (metric(before_text, name, **labels) or 0)

    kinds = {"MariadbGtidEvent": n, "TableMapEvent": n, "RowsEvent": n, "XidEvent": n}
    assert {kind: delta("binlake_events_total", type=kind) for kind in kinds} == kinds
    assert delta("binlake_received_bytes_total") == sent  # each event's bytes, once
    assert metric(text, "binlake_rows_total", database=database, table="t", op="insert") == n + 1
    assert metric(text, "binlake_crc_failures_total") == 0
    assert delta("binlake_decode_seconds_total") > 0


def test_crc_failure_is_counted_and_the_row_lands_once(mariadb_10_11: ServerHandle,
                                                        tmp_path: Path) -> None:
    server = mariadb_10_11
    database = unique_db("ops_crc")
    server.sql(f"CREATE DATABASE {database}; "
               f"CREATE TABLE {database}.t (id INT PRIMARY KEY, v VARCHAR(40))")
    marker = f"crc-{uuid.uuid4().hex[:12]}"
    lake = tmp_path / "lake"
    with TcpProxy("127.0.0.1", server.port) as proxy:
        settings = daemon_settings(server, lake, database, port=proxy.port, overrides={
            "server": {"tls_mode": "disabled"}})  # the proxy must see the event's bytes
        daemon = DaemonProcess(tmp_path, settings, password=server.users["repl"].password)
        daemon.start()
        try:
            base = daemon.metrics_url()
            daemon.wait_for(r"streaming from")
            proxy.corrupt_once(marker.encode())
            server.sql(f"INSERT INTO {database}.t VALUES (1, '{marker}'), (2, 'two')")
            daemon.wait_for(r"connection to the server lost \(ChecksumMismatch: CRC32 mismatch")
            daemon.wait_for(r"streaming again after")
            rows = wait_until(lambda: read_lake(lake, database).rows.get("t"), 20,
                              "the rows landed")
            text = scrape(base)
        finally:
            code, _took = daemon.terminate(timeout=15)
    assert proxy.corrupted == 1
    assert code == 0, daemon.stderr()
    assert [(r["id"], r["v"], r["_op"]) for r in rows] == [(1, marker, "I"), (2, "two", "I")]
    assert metric(text, "binlake_crc_failures_total") == 1
    assert metric(text, "binlake_reconnects_total", reason="ChecksumMismatch") == 1
    assert metric(text, "binlake_rows_total", database=database, table="t", op="insert") == 2


# --- one lag; reconnect lines; progress ---------------------------------------------------------


def test_one_lag_behind_idle_and_after_a_server_restart(server_factory: ServerFactory,
                                                        tmp_path: Path) -> None:
    server, database = plain_server_table(server_factory, "ops_lag",
                                          "id INT PRIMARY KEY AUTO_INCREMENT, v INT")
    lake = tmp_path / "lake"
    with TcpProxy("127.0.0.1", server.port) as proxy:
        settings = daemon_settings(server, lake, database, port=proxy.port, overrides={
            "replica": {"heartbeat_period": 8.0},  # a held stream is a stall only after 16 s
            "start": {"from": "earliest"},
        })
        daemon = DaemonProcess(tmp_path, settings, password=server.users["repl"].password)
        daemon.start()
        try:
            base = daemon.metrics_url()
            server.sql(f"INSERT INTO {database}.t (v) VALUES (1), (2), (3)")
            wait_caught_up(base)
            # idle: 0 for every reader, sample after sample (no drift between heartbeats)
            for _ in range(3):
                assert_caught_up_everywhere(daemon, base)
                time.sleep(1.0)

            # the stream is held while the server writes: behind, in seconds and bytes
            assert proxy.hold_open() >= 1
            deadline = time.monotonic() + 14
            behind: tuple[float, float] | None = None
            n = 0
            while time.monotonic() < deadline:
                n += 1
                server.sql(f"INSERT INTO {database}.t (v) VALUES ({n})")
                text = scrape(base)
                seconds = metric(text, "binlake_lag_seconds")
                gap = metric(text, "binlake_lag_bytes")
                if seconds and gap and seconds > 0 and gap > 0:
                    behind = (seconds, gap)
                    break
                time.sleep(0.3)
            assert behind is not None, "the lag never showed the held stream behind"
            status, body = http_get(f"{base}/readyz")
            assert status == 200 and re.fullmatch(
                r"ready: connected, \d+\.\d s behind the server\n", body), body
            proxy.resume()
            wait_until(lambda: len(read_lake(lake, database).rows.get("t", [])) == 3 + n, 30,
                       "the held rows landed")
            wait_caught_up(base)
            assert_caught_up_everywhere(daemon, base)

            # the server restarts: one line when lost, one when back, then idle at 0 again
            mark = len(daemon.run_stderr())
            server.restart()
            daemon.wait_for(r"streaming again after", since=mark, timeout=60)
            wait_caught_up(base)
            for _ in range(3):
                assert_caught_up_everywhere(daemon, base)
                time.sleep(1.0)
            outage = daemon.run_stderr()[mark:]
        finally:
            code, _took = daemon.terminate(timeout=15)
    assert code == 0, daemon.stderr()
    lost = re.findall(r"WARNING .*connection to the server lost \((\w+): (.*)\); reconnecting",
                      outage)
    assert len(lost) == 1, outage
    assert lost[0][1].strip() and not lost[0][1].rstrip().endswith(":"), lost
    assert len(re.findall(r"INFO .*streaming again after", outage)) == 1, outage
    assert len(re.findall(r"^\S+ WARNING ", outage, re.M)) == 1, outage  # attempts: DEBUG
    assert not ENUM_REPR.search(daemon.stderr()), ENUM_REPR.search(daemon.stderr())
    assert "streaming from mariadb-bin" in daemon.stderr() or re.search(
        r"streaming from \S+:4 \(the oldest binlog\)", daemon.stderr()), daemon.stderr()[:2000]


def test_catch_up_progress_lines_and_stop_summary(server_factory: ServerFactory,
                                                  tmp_path: Path) -> None:
    server, database = plain_server_table(server_factory, "ops_progress",
                                          "id INT PRIMARY KEY, v CHAR(8)")
    start = binlog_end(server)
    backlog = 3000
    server.sql(";\n".join(f"INSERT INTO {database}.t VALUES ({i}, '{i:08d}')"
                          for i in range(backlog)))
    time.sleep(2.0)  # the backlog is seconds old: the daemon starts behind
    lake = tmp_path / "lake"
    with TcpProxy("127.0.0.1", server.port) as proxy:
        proxy.throttle(200_000)  # ~4 s to stream the backlog
        settings = daemon_settings(server, lake, database, port=proxy.port, overrides={
            "start": {"from": "file", "file": start[0], "pos": start[1]},
            "log": {"progress_interval": 0.5},
        })
        daemon = DaemonProcess(tmp_path, settings, password=server.users["repl"].password)
        daemon.start()
        try:
            daemon.wait_for(rf"caught up with the server: {backlog} transactions and {backlog} "
                            r"rows landed in [\d.]+ s since the start", timeout=90)
        finally:
            code, _took = daemon.terminate(timeout=15)
    stderr = daemon.stderr()
    assert code == 0, stderr
    lines = re.findall(r"INFO +binlake\.daemon: catching up: (\d+) transactions and (\d+) rows "
                       r"landed.*behind the server(.*)", stderr)
    assert len(lines) >= 2, stderr
    counts = [int(t) for t, _rows, _rest in lines]
    assert counts == sorted(counts) and counts[-1] <= backlog
    assert any("left" in rest for _t, _r, rest in lines), lines
    assert re.search(rf"INFO +binlake\.daemon: stopped: {backlog} transactions and {backlog} rows "
                     r"landed in .*; the lake is complete up to transaction \d+", stderr), stderr
    assert not ENUM_REPR.search(stderr)


# --- small promises -----------------------------------------------------------------------------


def test_flush_interval_below_half_a_second_is_honoured(server_factory: ServerFactory,
                                                        tmp_path: Path) -> None:
    server, database = plain_server_table(server_factory, "ops_flush", "id INT PRIMARY KEY")
    lake = tmp_path / "lake"
    settings = daemon_settings(server, lake, database, overrides={
        "lake": {"flush_interval": 0.05}})
    daemon = DaemonProcess(tmp_path, settings, password=server.users["repl"].password)
    daemon.start()
    delays = []
    try:
        daemon.wait_for(r"streaming from")
        for i in range(8):
            server.sql(f"INSERT INTO {database}.t VALUES ({i})")
            started = time.monotonic()
            wait_until(lambda i=i: i in {r["id"] for r in read_lake(lake, database).rows.get(
                "t", [])}, 10, f"row {i} landed")
            delays.append(time.monotonic() - started)
    finally:
        code, _took = daemon.terminate(timeout=15)
    assert code == 0, daemon.stderr()
    # a fixed 0.5 s tick lands a row 0.05..0.55 s after it arrives (median ~0.3 s)
    assert statistics.median(delays) < 0.2, delays


@pytest.mark.parametrize("log_format", ["json", "human"])
def test_fatal_error_is_the_last_line_of_the_log_file(mariadb_10_11: ServerHandle,
                                                      tmp_path: Path, log_format: str) -> None:
    server = mariadb_10_11
    log_file = tmp_path / "binlake.log"
    settings = daemon_settings(server, tmp_path / "lake", "unused", log_format=log_format,
                               overrides={"log": {"file": str(log_file)}})
    daemon = DaemonProcess(tmp_path, settings, password=f"wrong-{uuid.uuid4().hex}")
    assert daemon.start().wait(timeout=30) == EXIT_PERMANENT
    last = log_file.read_text().splitlines()[-1]
    if log_format == "json":
        record = json.loads(last)
        assert record["level"] == "error" and record["error"] == "AccessDenied", record
        assert record["message"].startswith("AccessDenied: ") and record["fix"], record
    else:
        assert " ERROR   binlake: AccessDenied: " in last and "fix=" in last, last
    assert "AccessDenied" in daemon.stderr()  # and on stderr too
