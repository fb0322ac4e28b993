"""Snapshots on real servers: ``start.from = snapshot`` on tables filled before binlake started
(their binlogs reset, so the rows exist nowhere else), with a writer changing them throughout
and the daemon killed -9 in the middle; then the lake's state == SELECT, cell for cell, every
type of the workload's matrix, each key read once, each first change after an R row carrying
the R row as its before image.

Sizes: ``BINLAKE_SNAPSHOT_TXNS`` transactions fill the tables first (default 120),
``BINLAKE_SNAPSHOT_KILLS`` kill -9s during the snapshot (default 2).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from devtools.sandbox import SandboxError
from tests.servers.handle import ServerHandle

from .daemon_process import DaemonProcess, trusted_tls, unique_db
from .snapshot_check import (
    Writer,
    compare_snapshot_lake,
    reset_binlogs,
    snapshot_entries,
    snapshot_settings,
    wait_caught_up,
    wait_snapshots_done,
)
from .workload import Workload

pytestmark = pytest.mark.server

TXNS = int(os.environ.get("BINLAKE_SNAPSHOT_TXNS", "120"))
KILLS = int(os.environ.get("BINLAKE_SNAPSHOT_KILLS", "2"))
LAG_WRITERS = int(os.environ.get("BINLAKE_SNAPSHOT_LAG_WRITERS", "3"))


def _settings(server: ServerHandle, lake: Path, database: str, **sections: dict[str, object]
              ) -> dict[str, dict[str, object]]:
    settings = snapshot_settings(server, lake, database, overrides={
        # A pause between chunks keeps the snapshot running while the test kills the daemon
        # (MariaDB's reads need no grace: 15 chunks are otherwise read in well under a second).
        "start": {"from": "snapshot"}, "snapshot": {"chunk_rows": 25, "chunk_pause": 0.2},
        **sections})
    settings["server"].update(trusted_tls(server))
    return settings


def _wait_chunks(daemon: DaemonProcess, lake: Path, at_least: int) -> None:
    """Until the checkpoint holds at least ``at_least`` more landed chunks than now."""
    import time

    def landed() -> int:
        return sum(e.get("chunks", 0) for e in snapshot_entries(lake).values())

    target = landed() + at_least
    deadline = time.monotonic() + 60
    while landed() < target:
        daemon.check_alive()
        assert time.monotonic() < deadline, f"no chunk landed in 60 s: {snapshot_entries(lake)}"
        time.sleep(0.05)


def _filled(server: ServerHandle, prefix: str, seed: int) -> Workload:
    """The workload's tables filled with ``TXNS`` transactions whose binlogs are gone."""
    workload = Workload(server, unique_db(prefix), seed=seed)
    workload.create_tables()
    workload.run(TXNS, batch=40)
    reset_binlogs(server)
    return workload


def _start_from_snapshot(server: ServerHandle, tmp_path: Path) -> None:
    workload = _filled(server, "snap", 14)
    database = workload.database
    lake = tmp_path / "lake"
    daemon = DaemonProcess(tmp_path, _settings(server, lake, database),
                           password=server.users["repl"].password)
    names = {f"{database}.{t}" for t in workload.tables}
    with Writer(workload) as writer:
        daemon.start()
        for _ in range(KILLS):
            _wait_chunks(daemon, lake, 2)
            daemon.kill()
            daemon.start()
        wait_snapshots_done(lake, names, 120, daemon.check_alive)
        writer.stop()
        assert writer.transactions > 0
    wait_caught_up(server, lake, 60, daemon.check_alive)
    code, _ = daemon.terminate(20)
    assert code == 0, daemon.stderr()
    entries = snapshot_entries(lake)
    assert {n: entries[n]["status"] for n in names} == {n: "done" for n in names}
    # Every chunk exact: MariaDB's read at its consistent snapshot's binlog point, MySQL's
    # between GTID watermarks (no grace on either).
    exact = {n: entries[n].get("exact_chunks", 0) for n in names if entries[n]["rows"]}
    assert exact == {n: entries[n]["chunks"] for n in exact}
    changes = compare_snapshot_lake(server, lake, workload)
    reads = sum(1 for rows in changes.rows.values() for r in rows if r["_op"] == "R")
    assert reads == sum(entries[n]["rows"] for n in names)
    assert "Traceback" not in daemon.stderr()


def test_start_from_snapshot_mariadb_10_11(mariadb_10_11: ServerHandle, tmp_path: Path) -> None:
    _start_from_snapshot(mariadb_10_11, tmp_path)


def test_start_from_snapshot_mariadb_11_8(mariadb_11_8: ServerHandle, tmp_path: Path) -> None:
    _start_from_snapshot(mariadb_11_8, tmp_path)


def test_start_from_snapshot_mysql_9_7(mysql_9_7: ServerHandle, tmp_path: Path) -> None:
    _start_from_snapshot(mysql_9_7, tmp_path)


def test_mysql_snapshot_under_the_worst_commit_lag(mysql_9_7: ServerHandle,
                                                   tmp_path: Path) -> None:
    """The lag between a transaction's binlog write and its engine commit made as long as
    MySQL allows: ``sync_binlog = 0`` sends a group to replicas once it is written, and
    ``binlog_group_commit_sync_delay`` at its maximum (1 s) holds its engine commit a second
    after that — a transaction the stream has already passed is then invisible to a read for
    a second, with a writer changing the tables throughout. The GTID watermarks wait for
    exactly those commits: the lake replays to SELECT, every before image equal to the
    replayed row, every chunk exact."""
    server = mysql_9_7
    workload = _filled(server, "snaplag", 29)
    database = workload.database
    lake = tmp_path / "lake"
    saved = server.sql("SELECT @@GLOBAL.sync_binlog, @@GLOBAL.binlog_group_commit_sync_delay")
    server.sql("SET GLOBAL sync_binlog = 0; SET GLOBAL binlog_group_commit_sync_delay = 1000000")
    try:
        daemon = DaemonProcess(tmp_path, _settings(
            server, lake, database, snapshot={"chunk_rows": 10, "chunk_pause": 0.3}),
            password=server.users["repl"].password)
        names = {f"{database}.{t}" for t in workload.tables}
        stop = threading.Event()
        bumps = [0] * LAG_WRITERS
        errors: list[BaseException] = []

        def bump(n: int) -> None:  # a writer of its own: rows the snapshot reads, re-read
            tables = sorted(workload.tables)
            try:
                while not stop.is_set():
                    try:
                        server.sql(f"UPDATE {database}.{tables[bumps[n] % len(tables)]} "
                                   "SET rev = rev + 1 ORDER BY RAND() LIMIT 3")
                    except SandboxError as exc:  # two writers' random rows: try again
                        if "ERROR 1213" not in str(exc):
                            raise
                        continue
                    bumps[n] += 1
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=bump, args=(n,), daemon=True)
                   for n in range(LAG_WRITERS)]
        with Writer(workload, pause=0) as writer:
            for thread in threads:
                thread.start()
            daemon.start()
            try:
                wait_snapshots_done(lake, names, 300, daemon.check_alive)
            finally:
                stop.set()
                for thread in threads:
                    thread.join(30)
            writer.stop()
        assert errors == [] and writer.transactions > 0 and min(bumps) > 0, (errors, bumps)
    finally:
        server.sql(f"SET GLOBAL sync_binlog = {saved[0][0]}; "
                   f"SET GLOBAL binlog_group_commit_sync_delay = {saved[0][1]}")
    wait_caught_up(server, lake, 120, daemon.check_alive)
    code, _ = daemon.terminate(20)
    assert code == 0, daemon.stderr()
    entries = snapshot_entries(lake)
    assert {n: entries[n]["status"] for n in names} == {n: "done" for n in names}
    changes = compare_snapshot_lake(server, lake, workload)
    reads = sum(1 for rows in changes.rows.values() for r in rows if r["_op"] == "R")
    assert reads == sum(entries[n]["rows"] for n in names)
    exact = {n: (entries[n].get("exact_chunks", 0), entries[n]["chunks"]) for n in names}
    assert all(e == c for e, c in exact.values()), exact
    assert "without GTIDs" not in daemon.stderr()
    print(f"writers: {writer.transactions} + {sum(bumps)} transactions during the snapshot; "
          f"chunks {exact}")
