"""XA transactions through the daemon on real servers: a prepared part stays invisible until XA
COMMIT lands it (once) or XA ROLLBACK drops it — across SIGTERM and kill -9 of the daemon in
between; ONE PHASE commits land like any transaction; a rollback before PREPARE never lands."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sinks.spark.state import read_current_state
from tests.servers.handle import ServerHandle

from .daemon_process import (
    STOP_TIMEOUT,
    DaemonProcess,
    binlog_end,
    catch_up,
    catch_up_config,
    daemon_settings,
    read_checkpoint,
    trusted_tls,
    unique_db,
)
from .workload import read_lake

pytestmark = pytest.mark.server


@pytest.fixture(params=["mariadb-10.11", "mysql-9.7"])
def server(request: pytest.FixtureRequest) -> ServerHandle:
    name = {"mariadb-10.11": "mariadb_10_11", "mysql-9.7": "mysql_9_7"}[request.param]
    handle: ServerHandle = request.getfixturevalue(name)
    return handle


async def test_xa_transactions_land_once(server: ServerHandle, tmp_path: Path) -> None:
    db = f"xa_{uuid.uuid4().hex[:8]}"
    start = binlog_end(server)
    server.sql(
        f"CREATE DATABASE {db}; CREATE TABLE {db}.t (id INT PRIMARY KEY, v VARCHAR(10)) "
        "ENGINE=InnoDB;"
        f"XA START 'a'; INSERT INTO {db}.t VALUES (1, 'one'), (2, 'two'); XA END 'a'; "
        "XA PREPARE 'a'; XA COMMIT 'a';"
        f"XA START 'b'; INSERT INTO {db}.t VALUES (3, 'three'); XA END 'b'; XA ROLLBACK 'b';"
        f"XA START 'c'; UPDATE {db}.t SET v = 'uno' WHERE id = 1; XA END 'c'; "
        "XA COMMIT 'c' ONE PHASE;"
        f"INSERT INTO {db}.t VALUES (4, 'four')")
    await catch_up(catch_up_config(server, tmp_path / "lake", start, include=(db,)))

    changes = read_lake(tmp_path / "lake", db).rows["t"]
    assert [(r["_op"], r["id"], r["v"]) for r in changes] == [
        ("I", 1, "one"), ("I", 2, "two"), ("U", 1, "uno"), ("I", 4, "four")]
    assert len({(r["_seq"], r["_row"]) for r in changes}) == len(changes)
    assert all(r["_commit_ts"] is not None for r in changes)


def _wait_checkpoint(daemon: DaemonProcess, lake: Path, test: Callable[[dict[str, Any]], bool],
                     what: str, timeout: float = 30.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        checkpoint = read_checkpoint(lake)
        if checkpoint is not None and test(checkpoint):
            return checkpoint
        daemon.check_alive()
        assert time.monotonic() < deadline, f"no checkpoint with {what}: {checkpoint}"
        time.sleep(0.1)


def _in_doubt(checkpoint: dict[str, Any]) -> list[str]:
    return [x["xid"] for x in checkpoint.get("xa_prepared", [])]


def _prepare(server: ServerHandle, db: str, xid: str, statements: str) -> None:
    server.sql(f"XA START '{xid}'; {statements}; XA END '{xid}'; XA PREPARE '{xid}'",
               database=db)


@pytest.mark.spark
def test_only_committed_xa_rows_land_across_restarts(
        server: ServerHandle, tmp_path: Path, spark: Any) -> None:
    """prepare→rollback, prepare→commit, and both with SIGTERM and with kill -9 of the daemon
    between PREPARE and the outcome: the lake holds exactly the committed rows, and Spark's
    current state equals SELECT."""
    db = unique_db("xa_doubt")
    lake = tmp_path / "lake"
    settings = daemon_settings(server, lake, db, overrides={"server": trusted_tls(server)})
    daemon = DaemonProcess(tmp_path, settings, password=server.users["repl"].password)
    daemon.start()
    daemon.wait_for("streaming from")
    server.sql(f"CREATE DATABASE {db}; CREATE TABLE {db}.t (id INT PRIMARY KEY, "
               "v VARCHAR(20)) ENGINE=InnoDB; "
               f"INSERT INTO {db}.t VALUES (1, 'one'), (2, 'two'); "
               f"INSERT INTO {db}.t VALUES (3, 'three')")
    hx = uuid.uuid4().hex[:6]

    def ids(name: str) -> str:
        return f"{name}{hx}"

    def stopped(kind: str) -> None:
        if kind == "sigterm":
            code, _took = daemon.terminate(timeout=STOP_TIMEOUT + 5)
            assert code == 0, daemon.run_stderr()
        else:
            daemon.kill()

    # in doubt while the daemon runs, then rolled back / committed
    _prepare(server, db, ids("r0"), "INSERT INTO t VALUES (10, 'r0'); "
                                    "UPDATE t SET v = 'r0' WHERE id = 1")
    _wait_checkpoint(daemon, lake, lambda c: len(_in_doubt(c)) == 1, "r0 in doubt")
    assert [r["id"] for r in read_lake(lake, db).rows["t"]] == [1, 2, 3]  # r0 is invisible
    server.sql(f"XA ROLLBACK '{ids('r0')}'")
    _prepare(server, db, ids("c0"), "INSERT INTO t VALUES (20, 'c0'); "
                                    "UPDATE t SET v = 'c0' WHERE id = 2")
    server.sql(f"XA COMMIT '{ids('c0')}'")
    # the daemon stops (SIGTERM, then kill -9) while a transaction is in doubt
    for kind in ("sigterm", "kill"):
        for outcome in ("ROLLBACK", "COMMIT"):
            xid = ids(f"{kind[0]}{outcome[0].lower()}")
            key = {"sr": 30, "sc": 40, "kr": 50, "kc": 60}[xid[:2]]
            _prepare(server, db, xid, f"INSERT INTO t VALUES ({key}, '{xid[:2]}'); "
                                      f"UPDATE t SET v = '{xid[:2]}' WHERE id = 3")
            _wait_checkpoint(daemon, lake, lambda c: len(_in_doubt(c)) == 1, f"{xid} in doubt")
            stopped(kind)
            server.sql(f"XA {outcome} '{xid}'")
            daemon.start()
            daemon.wait_for("streaming from")
    server.sql("INSERT INTO t VALUES (99, 'end')", database=db)
    _wait_checkpoint(daemon, lake, lambda c: not _in_doubt(c) and any(
        r["id"] == 99 for r in read_lake(lake, db).rows.get("t", [])), "the end marker")
    code, _took = daemon.terminate(timeout=STOP_TIMEOUT + 5)
    assert code == 0, daemon.run_stderr()

    changes = read_lake(lake, db).rows["t"]
    assert [(r["_op"], r["id"], r["v"]) for r in changes] == [
        ("I", 1, "one"), ("I", 2, "two"), ("I", 3, "three"),
        ("I", 20, "c0"), ("U", 2, "c0"),
        ("I", 40, "sc"), ("U", 3, "sc"),
        ("I", 60, "kc"), ("U", 3, "kc"),
        ("I", 99, "end")]
    assert len({(r["_seq"], r["_row"]) for r in changes}) == len(changes) == 10
    assert os.listdir(lake / "_xa") == []
    assert "xa_prepared" not in (read_checkpoint(lake) or {})

    state = read_current_state(spark, str(lake), db, "t").select("id", "v").collect()
    source = server.sql(f"SELECT id, v FROM {db}.t")
    assert sorted((r["id"], r["v"]) for r in state) == sorted(
        (int(i or 0), v) for i, v in source) == [
        (1, "one"), (2, "c0"), (3, "kc"), (20, "c0"), (40, "sc"), (60, "kc"), (99, "end")]
