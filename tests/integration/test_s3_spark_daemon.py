"""Spark reads the lake ``binlake run`` lands on the real S3 gateway, equal to ``SELECT``.

MariaDB 10.11 and MySQL 9.7 each feed a daemon whose lake is a bucket of the test bed's Ceph
gateway: inserts, a key-changing update, updates, deletes and a rolled-back transaction, each
landed as a file of its own; ``binlake compact`` beside the daemon makes them one, and more rows
land after it. Spark then reads the lake through its commit log (objects through an s3fs mount:
``spark_root``): the current state equals the server's ``SELECT``, and the change log holds
every change once.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from sinks.objectstore.status import object_lake_facts
from sinks.spark.readers import read_changes
from sinks.spark.state import read_current_state
from tests.integration.daemon_process import DaemonProcess, daemon_settings, unique_db
from tests.integration.s3_lake import gateway_store
from tests.servers.ceph import CephGateway, S3fsMount
from tests.servers.handle import ServerHandle

pytestmark = [pytest.mark.s3, pytest.mark.spark]


def _facts(gateway: CephGateway, lake: str) -> Any:
    return object_lake_facts(gateway_store(gateway, lake), lake)


def _lake_rows(gateway: CephGateway, lake: str) -> int:
    return int(_facts(gateway, lake).rows)


def _lake_files(gateway: CephGateway, lake: str) -> int:
    return int(_facts(gateway, lake).files)


def _wait_rows(gateway: CephGateway, lake: str, rows: int, daemon: DaemonProcess) -> None:
    deadline = time.monotonic() + 120
    while _lake_rows(gateway, lake) != rows:
        daemon.check_alive()
        assert time.monotonic() < deadline, daemon.run_stderr()[-4000:]
        time.sleep(0.5)


@pytest.mark.parametrize("flavor", ["mariadb_10_11", "mysql_9_7"])
def test_spark_reads_the_daemons_s3_lake_equal_to_select(
        flavor: str, request: pytest.FixtureRequest, spark: Any, ceph_gateway: CephGateway,
        s3_bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server: ServerHandle = request.getfixturevalue(flavor)
    lake = f"s3://{s3_bucket}/lake"
    database = unique_db("s3spark")
    server.sql(f"CREATE DATABASE {database}; CREATE TABLE {database}.t "
               "(id INT PRIMARY KEY, v VARCHAR(20))")
    settings = daemon_settings(server, tmp_path / "unused", database, overrides={
        "lake": {"path": lake}, "lake.s3": {"endpoint": ceph_gateway.endpoint}})
    env = {**ceph_gateway.s3_env(), "TMPDIR": str(tmp_path)}
    reader_env = {**ceph_gateway.s3_env(), "BINLAKE_LAKE_S3_ENDPOINT": ceph_gateway.endpoint}
    daemon = DaemonProcess(tmp_path, settings, password=server.users["repl"].password,
                           env=env).start()
    t = f"{database}.t"
    try:
        daemon.wait_for(r"streaming", timeout=60)
        rows = 0
        for statement, changes in (  # each waited for: a file each, for compaction to merge
                (f"INSERT INTO {t} VALUES " + ", ".join(f"({n}, 'v{n}')" for n in range(1, 51)),
                 50),
                (f"UPDATE {t} SET v = 'updated' WHERE id <= 10", 10),
                (f"UPDATE {t} SET id = id + 1000 WHERE id BETWEEN 11 AND 15", 10),  # D + I
                (f"BEGIN; INSERT INTO {t} VALUES (999, 'rolled back'); ROLLBACK", 0),
                (f"DELETE FROM {t} WHERE id BETWEEN 16 AND 20", 5)):
            server.sql(statement)
            rows += changes
            _wait_rows(ceph_gateway, lake, rows, daemon)
        files = _lake_files(ceph_gateway, lake)
        assert files >= 4
        (tmp_path / "empty.toml").touch()
        compact = subprocess.run(  # beside the running daemon
            [sys.executable, "-m", "replica.cli", "compact", "--lake", lake, "--min-age", "0"],
            env={k: v for k, v in os.environ.items() if not k.startswith(("BINLAKE_", "AWS_"))}
            | reader_env | {"BINLAKE_CONFIG": str(tmp_path / "empty.toml")},
            capture_output=True, text=True, timeout=300)
        assert compact.returncode == 0, compact.stderr[-2000:]
        assert f"compacted 1 partitions: {files} files -> 1 " in compact.stdout
        assert _lake_files(ceph_gateway, lake) == 1
        server.sql(f"INSERT INTO {t} VALUES " + ", ".join(f"({n}, 'late')" for n in range(51, 61)))
        _wait_rows(ceph_gateway, lake, 85, daemon)
        code, _ = daemon.terminate(30)
        assert code == 0, daemon.run_stderr()
    finally:
        daemon.kill()
    expected = sorted((int(i), v) for i, v in server.sql(f"SELECT id, v FROM {t}"))
    with S3fsMount(ceph_gateway, s3_bucket, tmp_path / "mnt"):
        root = str(tmp_path / "mnt" / "lake")
        for key, value in reader_env.items():  # the readers' store, as an operator sets it
            monkeypatch.setenv(key, value)
        state = read_current_state(spark, lake, database, "t", spark_root=root)
        assert sorted((r["id"], r["v"]) for r in state.collect()) == expected
        changes = read_changes(spark, lake, database, "t", spark_root=root)
        assert changes.count() == 85
        assert changes.select("_seq", "_row").distinct().count() == 85
