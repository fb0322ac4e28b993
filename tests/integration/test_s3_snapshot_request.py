"""``binlake snapshot`` against a ``binlake run`` whose lake is a bucket of the test bed's Ceph
gateway (MariaDB 10.11): the command leaves a request object for the daemon, which snapshots the
table while it streams; the command exits 0 once the daemon's commit records say the table is
done, the request object is gone, and the table's rows are in the lake as ``_op = 'R'`` rows
equal, value for value, to ``SELECT``; a row changed after the snapshot streams as usual. Once
the daemon has stopped (its lease released), the command is the lake's writer for a while
itself.
"""

from __future__ import annotations

import decimal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from sinks.contract import SnapshotProgress
from sinks.objectstore.commit import CommitLog, live_objects
from sinks.objectstore.requests import REQUESTS
from sinks.objectstore.view import layout_name
from tests.servers.ceph import CephGateway
from tests.servers.handle import ServerHandle

from .daemon_process import REPO, DaemonProcess, daemon_settings, unique_db
from .s3_lake import gateway_store
from .test_s3_daemon import _wait

pytestmark = pytest.mark.s3


def _lake_rows(gateway: CephGateway, lake: str, database: str, table: str = "t"
               ) -> list[dict[str, Any]]:
    """Every row the lake's log keeps for ``database``.``table``, in ``_seq`` order."""
    store = gateway_store(gateway, lake)
    rows: list[dict[str, Any]] = []
    for key in live_objects(CommitLog(store).records()):
        name = layout_name(key)
        if name.startswith(f"{database}/{table}/") and name.endswith(".parquet"):
            rows += pq.read_table(store.open_input(key)).to_pylist()
    return sorted(rows, key=lambda r: (r["_seq"], r["_row"]))


def test_binlake_snapshot_asks_the_daemon_on_an_s3_lake(
        mariadb_10_11: ServerHandle, ceph_gateway: CephGateway, s3_bucket: str,
        tmp_path: Path) -> None:
    server, lake = mariadb_10_11, f"s3://{s3_bucket}/lake"
    database = unique_db("s3snapreq")
    server.sql(f"CREATE DATABASE {database}; CREATE TABLE {database}.t "
               "(id INT PRIMARY KEY, v VARCHAR(20), amount DECIMAL(10,2))")
    server.sql(f"INSERT INTO {database}.t VALUES " +
               ", ".join(f"({n}, 'before {n}', {n}.{n % 100:02d})" for n in range(1, 121)))
    server.sql(f"CREATE TABLE {database}.t2 (id INT PRIMARY KEY, v VARCHAR(20)); "
               f"INSERT INTO {database}.t2 VALUES (1, 'one'), (2, 'two'), (3, NULL)")
    # The daemon starts at the binlog's end: the table's existing rows are not in the lake.
    settings = daemon_settings(server, tmp_path / "unused", database, overrides={
        "lake": {"path": lake}, "lake.s3": {"endpoint": ceph_gateway.endpoint},
        "snapshot": {"chunk_rows": 50}})
    daemon = DaemonProcess(tmp_path, settings, password=server.users["repl"].password,
                           env={**ceph_gateway.s3_env(), "TMPDIR": str(tmp_path)})
    try:
        daemon.start()
        daemon.wait_for(r"streaming from", timeout=60)
        server.sql(f"UPDATE {database}.t SET v = 'streamed' WHERE id = 7")
        _wait(lambda: len(_lake_rows(ceph_gateway, lake, database)) == 1, daemon)
        expected = sorted((int(i), v, decimal.Decimal(a)) for i, v, a in
                          server.sql(f"SELECT id, v, amount FROM {database}.t"))
        done = _snapshot(daemon, f"{database}.t")
        assert done.returncode == 0, done.stderr[-4000:]
        assert "a daemon holds the lake" in done.stderr and "asked it to snapshot" in done.stderr
        assert f"{database}.t: 120 rows landed in 3 chunks" in done.stderr
        assert "snapshot requested" in daemon.run_stderr()
        rows = _lake_rows(ceph_gateway, lake, database)
        snapshot = sorted((r["id"], r["v"], r["amount"]) for r in rows if r["_op"] == "R")
        assert snapshot == expected
        server.sql(f"DELETE FROM {database}.t WHERE id = 8")  # streams on after the snapshot
        _wait(lambda: [r["_op"] for r in _lake_rows(ceph_gateway, lake, database)
                       if r["id"] == 8] == ["R", "D"], daemon)
        daemon.check_alive()
        code, _ = daemon.terminate(30)
        assert code == 0, daemon.run_stderr()
    finally:
        daemon.kill()
    store = gateway_store(ceph_gateway, lake)
    assert list(store.list(REQUESTS)) == []  # the request was cleared
    checkpoint = CommitLog(store).read(CommitLog(store).newest_number())
    assert checkpoint is not None and checkpoint.checkpoint is not None
    state = SnapshotProgress.from_json(checkpoint.checkpoint["snapshot"])
    (entry,) = [e for e in state.tables or () if e.name == f"{database}.t"]
    assert (entry.status, entry.rows, entry.chunks) == ("done", 120, 3)
    for secret in (ceph_gateway.access_key, ceph_gateway.secret_key):
        assert secret not in done.stderr and secret not in done.stdout

    alone = _snapshot(daemon, f"{database}.t2")  # no daemon: the command is the writer
    assert alone.returncode == 0, alone.stderr[-4000:]
    assert "a daemon holds the lake" not in alone.stderr
    assert [(r["_op"], r["id"], r["v"]) for r in _lake_rows(ceph_gateway, lake, database, "t2")
            ] == [("R", 1, "one"), ("R", 2, "two"), ("R", 3, None)]


def _snapshot(daemon: DaemonProcess, table: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "replica.cli", "snapshot", "--config", str(daemon.config_path),
         "--table", table],
        env=daemon._env(), cwd=REPO, capture_output=True, text=True, timeout=180)
