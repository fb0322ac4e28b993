"""A snapshot asked for by an INSERT into ``snapshot.signal_table``, on a real server whose
binlogs were reset after the table was filled (its rows can only come by a snapshot):

1. a daemon streams while a writer changes the tables; a row ('sig-1', 'snapshot',
   '{"tables": ["db.texts"]}') inserted into the signal table makes it snapshot ``texts`` (R
   rows), acknowledged in its log and in ``binlake status``; the signal table's own rows do not
   land (it is not included);
2. a signal of another type or malformed data is said in the log and ignored;
3. restarted, the daemon does not take the replayed signal again;
4. the lake's state of every keyed table == SELECT, cell for cell, every change exactly once
   (the same proof as ``binlake snapshot --table``'s).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.servers.handle import ServerHandle

from . import snapshot_check as check
from .daemon_process import REPO, DaemonProcess, unique_db
from .workload import TABLES, Workload

pytestmark = pytest.mark.server


def _signal_snapshot(server: ServerHandle, tmp_path: Path) -> None:
    database = unique_db("snapsig")
    lake = tmp_path / "lake"
    workload = Workload(server, database, seed=43, tables=tuple(
        t for t in TABLES if t.name in ("numbers", "texts")))
    workload.create_tables()
    workload.run(60, batch=30)
    server.sql("CREATE TABLE signals (id VARCHAR(64) PRIMARY KEY, type VARCHAR(32), data TEXT)",
               database=database)
    check.reset_binlogs(server)
    settings = check.snapshot_settings(server, lake, database, overrides={
        "start": {"from": "latest"},
        "snapshot": {"chunk_rows": 30, "signal_table": f"{database}.signals"},
        "filter": {"include": [f"{database}.numbers", f"{database}.texts"]}})
    daemon = DaemonProcess(tmp_path, settings, password=server.users["repl"].password)

    with check.Writer(workload) as writer:
        daemon.start()
        daemon.wait_for("streaming from")
        server.sql(
            "INSERT INTO signals VALUES ('odd-1', 'execute-snapshot', '{}'), "
            "('bad-1', 'snapshot', 'not json');"
            f"INSERT INTO signals VALUES ('sig-1', 'snapshot', "
            f"'{{\"tables\": [\"{database}.numbers\", \"{database}.texts\"]}}')",
            database=database)
        check.wait_snapshots_done(lake, {f"{database}.numbers", f"{database}.texts"}, 120,
                            daemon.check_alive)
        daemon.wait_for(r"snapshot signal 'sig-1' \(" + database + r"\.signals\): snapshot of "
                        + database + r"\.numbers, " + database + r"\.texts requested")
        status = subprocess.run(
            [sys.executable, "-m", "replica.cli", "status", "--config", str(daemon.config_path)],
            env=daemon._env(), cwd=REPO, capture_output=True, text=True, timeout=60)
        assert f"{database}.texts" in status.stdout, status.stdout + status.stderr
        assert status.stdout.count("(asked by signal sig-1)") == 2, status.stdout
        code, _ = daemon.terminate(20)
        assert code == 0, daemon.stderr()
        # restarted from its checkpoint: the signal is replayed from the binlog, not taken again
        daemon.start()
        daemon.wait_for("streaming from")
        writer.stop()
        assert writer.transactions > 0
    check.wait_caught_up(server, lake, 60, daemon.check_alive)
    code, _ = daemon.terminate(20)
    assert code == 0, daemon.stderr()

    log = daemon.stderr()
    assert "snapshot signal ignored: signal 'odd-1': type 'execute-snapshot'" in log
    assert "snapshot signal ignored: signal 'bad-1': data must be" in log
    assert log.count("snapshot signal 'sig-1'") == 1
    for table in ("numbers", "texts"):
        entry = check.snapshot_entries(lake)[f"{database}.{table}"]
        assert entry["status"] == "done" and entry["chunks"] >= 1
        assert entry["reason"] == "signal sig-1" and len(entry["requests"]) == 1
    assert not (lake / database / "signals").exists()  # not included: its rows never land
    check.compare_snapshot_lake(server, lake, workload)
    assert "Traceback" not in log


def test_snapshot_signal_mariadb_10_11(mariadb_10_11: ServerHandle, tmp_path: Path) -> None:
    _signal_snapshot(mariadb_10_11, tmp_path)


def test_snapshot_signal_mysql_9_7(mysql_9_7: ServerHandle, tmp_path: Path) -> None:
    _signal_snapshot(mysql_9_7, tmp_path)


def _lake_rows(lake: Path, database: str, table: str) -> list[dict[str, Any]]:
    files = sorted((lake / database / table).rglob("*.parquet"))
    return [r for f in files for r in pq.read_table(f).to_pylist()]


def _conditioned_signals(server: ServerHandle, tmp_path: Path) -> None:
    """A signal's ``condition`` limits the rows read, of a keyed table (chunks) and a keyless
    one (staged pieces) alike; a condition the server refuses fails that table's snapshot with
    the server's message (in the log and the status), and the daemon streams on; a condition
    that would leave its parentheses is refused before anything is asked."""
    database = unique_db("sigcond")
    values = ", ".join(f"({i}, {i * 7 % 11})" for i in range(1, 41))
    server.sql(f"CREATE DATABASE {database};"
               f"CREATE TABLE {database}.keyed (id INT PRIMARY KEY, v INT);"
               f"CREATE TABLE {database}.heap (id INT, v INT);"
               f"CREATE TABLE {database}.signals (id VARCHAR(64) PRIMARY KEY, type VARCHAR(32), "
               "data TEXT);"
               f"INSERT INTO {database}.keyed VALUES {values};"
               f"INSERT INTO {database}.heap VALUES {values}, {values}")
    lake = tmp_path / "lake"
    settings = check.snapshot_settings(server, lake, database, overrides={
        "start": {"from": "latest"},
        "snapshot": {"chunk_rows": 4, "signal_table": f"{database}.signals"},
        "filter": {"include": [f"{database}.keyed", f"{database}.heap"]}})
    daemon = DaemonProcess(tmp_path, settings, password=server.users["repl"].password)
    daemon.start()
    daemon.wait_for("streaming from")
    def signal(name: str, tables: list[str], condition: str) -> str:
        data = json.dumps({"tables": [f"{database}.{t}" for t in tables],
                           "condition": condition}).replace("'", "''")
        return f"('{name}', 'snapshot', '{data}')"

    server.sql(f"INSERT INTO signals VALUES {signal('c1', ['keyed', 'heap'], 'v % 3 = 0')}",
               database=database)
    check.wait_snapshots_done(lake, {f"{database}.keyed", f"{database}.heap"}, 120,
                              daemon.check_alive)
    server.sql(f"INSERT INTO signals VALUES {signal('c2', ['keyed'], 'nope = 1')}, "
               f"{signal('c3', ['keyed'], '1; DROP TABLE t')}", database=database)
    daemon.wait_for(f"snapshot of {database}.keyed failed: ")
    server.sql(f"INSERT INTO {database}.keyed VALUES (100, 5)")  # streaming goes on
    check.wait_caught_up(server, lake, 60, daemon.check_alive)
    status = subprocess.run(
        [sys.executable, "-m", "replica.cli", "status", "--config", str(daemon.config_path)],
        env=daemon._env(), cwd=REPO, capture_output=True, text=True, timeout=60)
    code, _ = daemon.terminate(20)
    assert code == 0, daemon.stderr()

    wanted = sorted((int(i or 0), int(v or 0)) for i, v in server.sql(
        f"SELECT id, v FROM {database}.keyed WHERE v % 3 = 0 AND id < 100"))
    assert len(wanted) == 15
    keyed = _lake_rows(lake, database, "keyed")
    assert sorted((r["id"], r["v"]) for r in keyed if r["_op"] == "R") == wanted
    assert [(r["_op"], r["id"], r["v"]) for r in keyed if r["_op"] != "R"] == [("I", 100, 5)]
    heap = _lake_rows(lake, database, "heap")
    assert sorted((r["id"], r["v"]) for r in heap) == sorted(wanted * 2)
    assert {r["_op"] for r in heap} == {"R"}

    entry = check.snapshot_entries(lake)[f"{database}.keyed"]
    assert entry["status"] == "failed" and entry["condition"] == "nope = 1"
    assert entry["message"].startswith(
        f"the condition 'nope = 1' cannot limit {database}.keyed: the server refused it "
        "(error 1054: Unknown column 'nope' in ")
    assert entry["message"].endswith("); nothing was read")
    heap_entry = check.snapshot_entries(lake)[f"{database}.heap"]
    assert heap_entry["status"] == "done" and heap_entry["condition"] == "v % 3 = 0"
    assert "(where nope = 1) (asked by signal c2): the condition" in status.stdout, status.stdout
    assert "(where v % 3 = 0) (asked by signal c1)" in status.stdout, status.stdout
    log = daemon.stderr()
    assert (f"snapshot signal 'c1' ({database}.signals): snapshot of {database}.keyed, "
            f"{database}.heap requested where v % 3 = 0") in log
    assert ("snapshot signal ignored: signal 'c3': its condition '1; DROP TABLE t' holds a ';' "
            "(one condition, not statements)") in log
    assert "Traceback" not in log


def test_signal_condition_mariadb_10_11(mariadb_10_11: ServerHandle, tmp_path: Path) -> None:
    _conditioned_signals(mariadb_10_11, tmp_path)


def test_signal_condition_mysql_9_7(mysql_9_7: ServerHandle, tmp_path: Path) -> None:
    _conditioned_signals(mysql_9_7, tmp_path)
