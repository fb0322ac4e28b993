"""Snapshots at their edges, on MariaDB 10.11 (the other flavors run the main proofs in
``test_snapshot.py`` and ``test_snapshot_command.py``):

* kill -9 at random moments, and right at the hand-off (when the last table is done), with a
  writer throughout: the lake still equals SELECT;
* ``binlake snapshot`` killed -9 mid-way and run again resumes after its last landed chunk;
* DDL (ADD COLUMN … DEFAULT) while a table is being read: the waiting chunk is read again with
  the new definition; Spark's current state equals the replayed lake, the column filled in;
* a table without any key that changes during every whole-table read: its snapshot fails
  with a clear error after the retries (exit 1), nothing of it lands;
* the system databases are never listed for a snapshot.

``BINLAKE_SNAPSHOT_RANDOM_KILLS`` sets the random kills (default 4).
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import trio

from replica.core.connection import Connection, ConnectOptions
from replica.core.snapshot import SYSTEM_DATABASES, list_tables
from tests.servers.handle import ServerHandle

from .daemon_process import REPO, DaemonProcess, unique_db
from .snapshot_check import (
    Writer,
    compare_snapshot_lake,
    replay,
    reset_binlogs,
    snapshot_daemon,
    snapshot_entries,
    wait_caught_up,
    wait_snapshots_done,
)
from .test_snapshot_command import _snapshot
from .workload import TABLES, TableSpec, Workload, read_lake

pytestmark = pytest.mark.server

RANDOM_KILLS = int(os.environ.get("BINLAKE_SNAPSHOT_RANDOM_KILLS", "4"))


def _daemon(server: ServerHandle, tmp_path: Path, database: str, start: str = "snapshot",
            chunk_rows: int = 20, **snapshot: object) -> DaemonProcess:
    return snapshot_daemon(server, tmp_path, database, start, chunk_rows=chunk_rows, **snapshot)


def _filled(server: ServerHandle, prefix: str, txns: int = 100,
            tables: tuple[TableSpec, ...] = TABLES) -> Workload:
    workload = Workload(server, unique_db(prefix), seed=len(prefix), tables=tables)
    workload.create_tables()
    workload.run(txns, batch=50)
    reset_binlogs(server)
    return workload


def test_kill_9_at_random_moments_and_at_the_hand_off(mariadb_10_11: ServerHandle,
                                                      tmp_path: Path) -> None:
    _kill_9_at_random_moments_and_at_the_hand_off(mariadb_10_11, tmp_path)


def test_kill_9_at_random_moments_and_at_the_hand_off_mariadb_11_8(
        mariadb_11_8: ServerHandle, tmp_path: Path) -> None:
    """11.8 too: its chunks are read at their consistent snapshot's binlog point, no grace."""
    _kill_9_at_random_moments_and_at_the_hand_off(mariadb_11_8, tmp_path)


def _kill_9_at_random_moments_and_at_the_hand_off(server: ServerHandle, tmp_path: Path) -> None:
    workload = _filled(server, "snapkill")
    lake = tmp_path / "lake"
    daemon = _daemon(server, tmp_path, workload.database, chunk_pause=0.05)
    names = {f"{workload.database}.{t}" for t in workload.tables}
    rng = random.Random(RANDOM_KILLS)
    with Writer(workload) as writer:
        for _ in range(RANDOM_KILLS):
            daemon.start()
            time.sleep(rng.uniform(0.3, 2.5))
            daemon.kill()
        daemon.start()
        # the hand-off: kill the moment the checkpoint says the last table is done
        deadline = time.monotonic() + 120
        while not all(snapshot_entries(lake).get(n, {}).get("status") == "done" for n in names):
            daemon.check_alive()
            assert time.monotonic() < deadline, snapshot_entries(lake)
            time.sleep(0.01)
        daemon.kill()
        daemon.start()
        time.sleep(1.0)
        writer.stop()
        assert writer.transactions > 0
    wait_caught_up(server, lake, 60, daemon.check_alive)
    code, _ = daemon.terminate(20)
    assert code == 0, daemon.stderr()
    compare_snapshot_lake(server, lake, workload)


def test_the_command_killed_mid_way_resumes(mariadb_10_11: ServerHandle,
                                            tmp_path: Path) -> None:
    server = mariadb_10_11
    workload = _filled(server, "snapcmdkill", txns=150)
    lake = tmp_path / "lake"
    daemon = _daemon(server, tmp_path, workload.database, start="latest", chunk_rows=5,
                     chunk_pause=0.2)
    numbers = f"{workload.database}.numbers"
    argv = [sys.executable, "-m", "replica.cli", "snapshot", "--config",
            str(daemon.config_path), "--table", numbers]
    process = subprocess.Popen(argv, env=daemon._env(), cwd=REPO, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while snapshot_entries(lake).get(numbers, {}).get("chunks", 0) < 2:
            assert process.poll() is None, "the command ended before it was killed"
            assert time.monotonic() < deadline, snapshot_entries(lake)
            time.sleep(0.02)
    finally:
        process.kill()
        process.wait()
    landed = snapshot_entries(lake)[numbers]
    assert landed["status"] == "running" and landed["chunks"] >= 2
    done = _snapshot(daemon, numbers)
    assert done.returncode == 0, done.stderr
    entry = snapshot_entries(lake)[numbers]
    count = int(server.sql(f"SELECT COUNT(*) FROM {numbers}")[0][0] or 0)
    assert entry["status"] == "done" and entry["rows"] == count
    rows = read_lake(lake, workload.database).rows["numbers"]
    assert sorted(r["id"] for r in rows if r["_op"] == "R") == sorted(
        int(v[0] or 0) for v in server.sql(f"SELECT id FROM {numbers}"))


@pytest.mark.spark
def test_ddl_while_a_table_is_read(mariadb_10_11: ServerHandle, tmp_path: Path,
                                   spark: object) -> None:
    from sinks.spark.state import read_current_state

    server = mariadb_10_11
    workload = _filled(server, "snapddl", txns=60, tables=TABLES[:1])  # numbers
    lake = tmp_path / "lake"
    daemon = _daemon(server, tmp_path, workload.database, chunk_rows=10, chunk_pause=0.3)
    numbers = f"{workload.database}.numbers"
    with Writer(workload, pause=0.1):
        daemon.start()
        deadline = time.monotonic() + 60
        while snapshot_entries(lake).get(numbers, {}).get("chunks", 0) < 1:
            daemon.check_alive()
            assert time.monotonic() < deadline, snapshot_entries(lake)
            time.sleep(0.02)
        server.sql(f"ALTER TABLE {numbers} ADD COLUMN extra INT NOT NULL DEFAULT 7")
        wait_snapshots_done(lake, {f"{workload.database}.{t}" for t in workload.tables}, 120,
                            daemon.check_alive)
    wait_caught_up(server, lake, 60, daemon.check_alive)
    code, _ = daemon.terminate(20)
    assert code == 0, daemon.stderr()
    assert "re-reading" in daemon.stderr() or "chunk discarded" in daemon.stderr()
    compare_snapshot_lake(server, lake, workload)
    rows = read_lake(lake, workload.database).rows["numbers"]
    assert {r.get("extra") for r in rows if r["_op"] == "R"} >= {None, 7}  # both versions
    expected = replay("numbers", ("id",), rows)
    state = read_current_state(spark, str(lake), workload.database, "numbers")  # type: ignore[arg-type]
    got = {r["id"]: (r["rev"], r["c_int"], r["c_dec"], r["extra"]) for r in state.collect()}
    assert got == {k[0]: (r["rev"], r["c_int"], r["c_dec"], 7) for k, r in expected.items()}


def test_a_keyless_table_that_never_rests_fails_clearly(mysql_9_7: ServerHandle,
                                                        tmp_path: Path) -> None:
    """A whole-table read (exact: between GTID watermarks on MySQL) that takes longer than
    the gap between two changes of the table is spoilt each time: a change every ~0.1 s
    against a read of 20,000 rows staged in pieces of 20. (A small table is snapshotted
    between two changes.)"""
    server = mysql_9_7
    database = unique_db("snapnokey")
    server.sql(f"CREATE DATABASE {database}; CREATE TABLE {database}.log (v INT); "
               "SET SESSION cte_max_recursion_depth = 20000; "
               f"INSERT INTO {database}.log WITH RECURSIVE n (i) AS (SELECT 1 UNION ALL "
               "SELECT i + 1 FROM n WHERE i < 20000) SELECT i FROM n")
    daemon = _daemon(server, tmp_path, database, start="latest")
    stop = threading.Event()

    def churn() -> None:
        while not stop.is_set():
            server.sql(f"INSERT INTO {database}.log VALUES (3); "
                       f"DELETE FROM {database}.log WHERE v = 3")
            time.sleep(0.05)

    thread = threading.Thread(target=churn, daemon=True)
    thread.start()
    try:
        done = _snapshot(daemon, f"{database}.log")
    finally:
        stop.set()
        thread.join(30)
    assert done.returncode == 1, done.stderr
    assert (f"{database}.log has no primary key nor NOT NULL unique key, and changed during "
            "each of 5 whole-table reads") in done.stderr
    entry = snapshot_entries(tmp_path / "lake")[f"{database}.log"]
    assert (entry["status"], entry["rows"]) == ("failed", 0)
    assert not [r for r in read_lake(tmp_path / "lake", database).rows.get("log", [])
                if r["_op"] == "R"]


def test_system_databases_are_never_listed(mariadb_10_11: ServerHandle) -> None:
    server = mariadb_10_11
    database = unique_db("snaplist")
    server.sql(f"CREATE DATABASE {database}; CREATE TABLE {database}.t (id INT PRIMARY KEY)")
    user = server.users["repl"]

    async def main() -> list[tuple[str, str]]:
        options = ConnectOptions(unix_socket=server.socket, user=user.name,
                                 password=user.password, tls_ca=server.tls_ca)
        async with await Connection.open(options) as conn:
            return await list_tables(conn)

    tables = trio.run(main)
    assert (database, "t") in tables
    assert not {d.lower() for d, _ in tables} & SYSTEM_DATABASES
    assert int(server.sql("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA "
                          "IN ('mysql', 'sys')")[0][0] or 0) > 0


def test_the_command_says_when_the_daemon_it_asked_dies(mariadb_10_11: ServerHandle,
                                                        tmp_path: Path) -> None:
    server = mariadb_10_11
    workload = _filled(server, "snapdies", txns=60, tables=TABLES[:1])
    daemon = _daemon(server, tmp_path, workload.database, start="latest", chunk_rows=2,
                     chunk_pause=0.5)
    daemon.start()
    daemon.wait_for("streaming from")
    numbers = f"{workload.database}.numbers"
    argv = [sys.executable, "-m", "replica.cli", "snapshot", "--config",
            str(daemon.config_path), "--table", numbers]
    process = subprocess.Popen(argv, env=daemon._env(), cwd=REPO, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        daemon.wait_for("snapshot requested")
        daemon.kill()
        _out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 1, err
    assert "stopped before the snapshot was done" in err
    assert not list((tmp_path / "lake" / "_snapshot_requests").glob("*.json"))
