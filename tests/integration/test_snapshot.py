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
from pathlib import Path

import pytest

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


def _start_from_snapshot(server: ServerHandle, tmp_path: Path) -> None:
    database = unique_db("snap")
    lake = tmp_path / "lake"
    workload = Workload(server, database, seed=14)
    workload.create_tables()
    workload.run(TXNS, batch=40)
    reset_binlogs(server)
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
    # MariaDB: every chunk read at its consistent snapshot's binlog point (no grace); MySQL: none.
    exact = {n: entries[n].get("exact_chunks", 0) for n in names if entries[n]["rows"]}
    assert exact == {n: entries[n]["chunks"] if server.is_mariadb else 0 for n in exact}
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
