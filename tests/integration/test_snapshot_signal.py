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

import subprocess
import sys
from pathlib import Path

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
