"""XA transactions through the daemon on real servers: the prepared part lands once, with its
rows; XA COMMIT adds nothing; a transaction rolled back before XA PREPARE never lands."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tests.servers.handle import ServerHandle

from .daemon_process import binlog_end, catch_up, catch_up_config
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
