"""Operating ``binlake run``: permanent errors end it at once with a clear line, /metrics shows
rows and lag during a run, /readyz follows the server, JSON logs are JSON, passwords stay secret.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest

from replica.cli import EXIT_PERMANENT
from tests.servers.handle import ServerHandle
from tests.servers.plugin import ServerFactory

from .daemon_process import DaemonProcess, daemon_settings, http_get, metric, unique_db
from .proxy import TcpProxy
from .workload import Workload, compare_lake, wait_for_lake

pytestmark = pytest.mark.server


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("binlake: error:")]


def test_wrong_password_exits_permanent_without_retrying(mariadb_10_11: ServerHandle,
                                                         tmp_path: Path) -> None:
    server = mariadb_10_11
    wrong = f"wrong-{uuid.uuid4().hex}"
    with TcpProxy("127.0.0.1", server.port) as proxy:
        daemon = DaemonProcess(
            tmp_path, daemon_settings(server, tmp_path / "lake", "unused", port=proxy.port),
            password=wrong)
        started = time.monotonic()
        code = daemon.start().wait(timeout=30)
        took = time.monotonic() - started
        attempts = proxy.accepted
    stderr = daemon.stderr()
    assert code == EXIT_PERMANENT, stderr
    assert took < 10, f"took {took:.1f} s to give up"
    assert attempts == 1, f"{attempts} connection attempts for a wrong password: a retry storm"
    (line,) = _error_lines(stderr)
    assert "AccessDenied" in line
    assert "fix:" in stderr and "Traceback" not in stderr
    daemon.assert_secret_never_shown(wrong)


def test_fatal_error_is_json_too_with_json_logs(mariadb_10_11: ServerHandle,
                                               tmp_path: Path) -> None:
    """A log shipper parsing JSON lines must not choke on the one line that matters most."""
    server = mariadb_10_11
    daemon = DaemonProcess(
        tmp_path, daemon_settings(server, tmp_path / "lake", "unused", log_format="json"),
        password=f"wrong-{uuid.uuid4().hex}")
    assert daemon.start().wait(timeout=30) == EXIT_PERMANENT
    for line in daemon.stderr().splitlines():
        json.loads(line)


def test_user_without_replication_slave_exits_with_one_clear_line(
        mariadb_10_11: ServerHandle, tmp_path: Path) -> None:
    server = mariadb_10_11
    user = f"norepl_{uuid.uuid4().hex[:8]}"
    password = uuid.uuid4().hex
    server.sql(f"CREATE USER '{user}'@'%' IDENTIFIED BY '{password}'; "
               f"GRANT SELECT, BINLOG MONITOR ON *.* TO '{user}'@'%'")
    try:
        settings = daemon_settings(server, tmp_path / "lake", "unused",
                                   overrides={"server": {"user": user}})
        daemon = DaemonProcess(tmp_path, settings, password=password)
        code = daemon.start().wait(timeout=30)
    finally:
        server.sql(f"DROP USER '{user}'@'%'")
    stderr = daemon.stderr()
    assert code == EXIT_PERMANENT, stderr
    (line,) = _error_lines(stderr)
    assert "MissingPrivilege" in line or "REPLICATION SLAVE" in line, line
    assert "REPLICATION SLAVE" in stderr  # the fix names the grant
    assert "Traceback" not in stderr
    assert stderr.count("reconnecting") == 0
    daemon.assert_secret_never_shown(password)


def _wait_status(url: str, status: int, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while True:
        got, body = http_get(url)
        if got == status:
            return body
        if time.monotonic() > deadline:
            raise AssertionError(f"{url}: {got} {body!r}, expected {status} within {timeout} s")
        time.sleep(0.2)


def test_metrics_readiness_and_json_logs_during_a_run(mariadb_10_11: ServerHandle,
                                                      tmp_path: Path) -> None:
    server = mariadb_10_11
    password = server.users["repl"].password
    database = unique_db("e2e_ops")
    lake = tmp_path / "lake"
    daemon = DaemonProcess(tmp_path, daemon_settings(server, lake, database, log_format="json"),
                           password=password)
    workload = Workload(server, database, seed=7)
    workload.create_tables()
    daemon.start()
    try:
        base = daemon.metrics_url()
        assert http_get(f"{base}/healthz")[0] == 200
        workload.run(40)
        wait_for_lake(lake, workload, alive=daemon.check_alive)
        _wait_status(f"{base}/readyz", 200, timeout=10)

        status, text = http_get(f"{base}/metrics")
        assert status == 200
        for table, ops in workload.row_events.items():
            for op in ("insert", "update", "delete"):
                value = metric(text, "binlake_rows_total", database=database, table=table,
                                op=op)
                assert (value or 0) == ops[op], (table, op, value, ops)
        assert metric(text, "binlake_lag_seconds") is not None
        # caught up: the end seen at connect, or an idle heartbeat, says 0 bytes behind
        deadline = time.monotonic() + 10
        while metric(text, "binlake_lag_bytes") != 0 and time.monotonic() < deadline:
            time.sleep(0.5)
            text = http_get(f"{base}/metrics")[1]
        assert metric(text, "binlake_lag_bytes") == 0
        assert metric(text, "binlake_connected") == 1
        assert (metric(text, "binlake_transactions_total") or 0) > 0
        assert 'binlake_last_landed_info{' in text and "gtid=\"0-" in text
        assert (metric(text, "binlake_received_bytes_total") or 0) > 0

        server.stop()
        try:
            body = _wait_status(f"{base}/readyz", 503, timeout=10)
            assert "not connected" in body
            assert http_get(f"{base}/healthz")[0] == 200  # alive, just not ready
        finally:
            server.start()
        _wait_status(f"{base}/readyz", 200, timeout=20)
        status, text = http_get(f"{base}/metrics")
        assert (metric(text, "binlake_reconnects_total", reason="EOFError") or 0) >= 1
    finally:
        code, _took = daemon.terminate(timeout=15)
    assert code == 0, daemon.stderr()
    compare_lake(server, lake, workload)

    lines = daemon.stderr().splitlines()
    assert lines
    for line in lines:
        record = json.loads(line)  # every line is one JSON object
        assert {"time", "level", "message"} <= set(record), record
    assert any(json.loads(line)["level"].lower().startswith("warn") for line in lines)
    daemon.assert_secret_never_shown(password)


def test_purged_resume_position_stops_with_exit_3(server_factory: ServerFactory,
                                                  tmp_path: Path) -> None:
    """The lake's checkpoint points into binlogs the server has since purged: retrying cannot
    help, so the daemon stops with the permanent-error code and says what to do."""
    server = server_factory.start("mariadb-10.11", name="e2e-purge")
    database = unique_db("e2e_purge")
    lake = tmp_path / "lake"
    daemon = DaemonProcess(tmp_path, daemon_settings(server, lake, database),
                           password=server.users["repl"].password)
    workload = Workload(server, database, seed=3)
    workload.create_tables()
    daemon.start()
    workload.run(10)
    wait_for_lake(lake, workload, alive=daemon.check_alive)
    assert daemon.terminate(timeout=15)[0] == 0

    workload.run(10)  # changes the lake has not seen, then their binlog goes away
    purge_all_but_the_current_binlog(server)
    started = time.monotonic()
    code = daemon.start().wait(timeout=30)
    stderr = daemon.run_stderr()
    assert code == EXIT_PERMANENT, stderr
    assert time.monotonic() - started < 10
    (line,) = _error_lines(stderr)
    assert "fix:" in stderr and "Traceback" not in stderr
    assert "reconnecting" not in stderr, "a purged position is not worth retrying"
    assert "1236" in line or "purged" in line.lower() or "Gtid" in line, line


def purge_all_but_the_current_binlog(server: ServerHandle, timeout: float = 20.0) -> None:
    """FLUSH + PURGE until the old files are gone: MariaDB keeps a file until its binlog
    checkpoint (InnoDB durability) has moved past it, so one PURGE may silently keep it."""
    first = server.sql("SHOW BINARY LOGS")[0][0]
    deadline = time.monotonic() + timeout
    while True:
        server.sql("FLUSH BINARY LOGS")
        (last,) = server.sql("SHOW MASTER STATUS")[0][:1]
        server.sql(f"PURGE BINARY LOGS TO '{last}'")
        if server.sql("SHOW BINARY LOGS")[0][0] != first:
            return
        assert time.monotonic() < deadline, "the server kept its old binlogs"
        time.sleep(0.5)
