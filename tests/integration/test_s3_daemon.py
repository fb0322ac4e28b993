"""``binlake run`` with its lake in a bucket of the test bed's Ceph gateway, from a real MariaDB
10.11: what an operator sees when the store refuses (a wrong secret, a missing bucket: exit 4, a
fix line naming the bucket, no key in any output) and when the gateway goes away mid-stream
(the daemon retries, and once the gateway is back the lake holds every row exactly once)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from sinks.objectstore.commit import CommitLog, live_objects
from sinks.objectstore.view import layout_name
from tests.integration.daemon_process import DaemonProcess, daemon_settings, unique_db
from tests.integration.s3_lake import gateway_store
from tests.servers.ceph import CephGateway
from tests.servers.handle import ServerHandle

pytestmark = pytest.mark.s3


def _daemon(server: ServerHandle, gateway: CephGateway, tmp_path: Path, lake: str,
            database: str, name: str = "binlake", **aws: str) -> DaemonProcess:
    settings = daemon_settings(server, tmp_path / "unused", database, overrides={
        "lake": {"path": lake},
        "lake.s3": {"endpoint": gateway.endpoint, "max_attempts": 1, "connect_timeout": 2.0,
                    "request_timeout": 10.0}})
    env = {**gateway.s3_env(), **aws, "TMPDIR": str(tmp_path)}
    return DaemonProcess(tmp_path, settings, password=server.users["repl"].password, env=env,
                         name=name)


def _lake_ids(gateway: CephGateway, lake: str, database: str) -> list[int]:
    """The ``id`` of every row the lake's log keeps for ``database``.t (one per change)."""
    store = gateway_store(gateway, lake)
    ids: list[int] = []
    for key in live_objects(CommitLog(store).records()):
        name = layout_name(key)
        if name.startswith(f"{database}/t/") and name.endswith(".parquet"):
            ids += pq.read_table(store.open_input(key), columns=["id"]).column("id").to_pylist()
    return sorted(ids)


def _secrets(gateway: CephGateway, server: ServerHandle, *more: str) -> list[str]:
    return [gateway.access_key, gateway.secret_key, server.users["repl"].password, *more]


def test_refusals_stop_with_4_and_a_fix(mariadb_10_11: ServerHandle, ceph_gateway: CephGateway,
                                        s3_bucket: str, tmp_path: Path) -> None:
    database = unique_db("s3refused")
    wrong = "not-the-secret-" + "q" * 25
    bad_key = _daemon(mariadb_10_11, ceph_gateway, tmp_path, f"s3://{s3_bucket}/lake",
                      database, name="wrong-secret", AWS_SECRET_ACCESS_KEY=wrong).start()
    assert bad_key.wait(60) == 4, bad_key.stderr()
    lines = bad_key.stderr().strip().splitlines()
    error = next(line for line in lines if line.startswith("binlake: error: "))
    assert error.startswith(f"binlake: error: StoreRefused: PUT If-None-Match s3://{s3_bucket}"
                            "/lake/_probe/")
    assert error.endswith(": 403 SignatureDoesNotMatch")
    assert lines[lines.index(error) + 1] == (
        "  fix: the request signature did not match: the secret key does not belong to the "
        "access key id; set AWS_SECRET_ACCESS_KEY (or lake.s3.secret_access_key_file) to the "
        "key pair's secret, then start binlake again: it resumes from the lake's last commit")

    missing = _daemon(mariadb_10_11, ceph_gateway, tmp_path, "s3://binlake-missing-bucket/lake",
                      database, name="missing-bucket").start()
    assert missing.wait(60) == 4, missing.stderr()
    lines = missing.stderr().strip().splitlines()
    error = next(line for line in lines if line.startswith("binlake: error: "))
    assert error.endswith(": 404 NoSuchBucket") and "s3://binlake-missing-bucket/lake/" in error
    assert lines[lines.index(error) + 1].startswith(
        "  fix: the bucket binlake-missing-bucket does not exist at this endpoint: create it")

    for daemon in (bad_key, missing):
        for secret in _secrets(ceph_gateway, mariadb_10_11, wrong):
            daemon.assert_secret_never_shown(secret)
    assert ceph_gateway.client().list_objects_v2(Bucket=s3_bucket).get("KeyCount") == 0


def test_the_gateway_stopped_mid_stream_is_waited_for(
        mariadb_10_11: ServerHandle, ceph_gateway: CephGateway, s3_bucket: str,
        tmp_path: Path) -> None:
    server, lake = mariadb_10_11, f"s3://{s3_bucket}/lake"
    database = _new_table(server, "s3outage")
    daemon = _daemon(server, ceph_gateway, tmp_path, lake, database).start()
    try:
        daemon.wait_for(r"streaming", timeout=60)
        server.sql(f"INSERT INTO {database}.t VALUES " +
                   ", ".join(f"({n}, 'before {n}')" for n in range(1, 101)))
        _wait(lambda: _lake_ids(ceph_gateway, lake, database) == list(range(1, 101)), daemon)
        mark = len(daemon.run_stderr())
        ceph_gateway.stop_gateway()
        try:
            server.sql(f"INSERT INTO {database}.t VALUES " +
                       ", ".join(f"({n}, 'during {n}')" for n in range(101, 201)))
            server.sql(f"UPDATE {database}.t SET v = 'updated' WHERE id <= 10")
            # The daemon meets the outage (an event in its log, not a guess about time) ...
            daemon.wait_for(r"object store: .* failed \(.*\); retrying", timeout=60, since=mark)
            daemon.check_alive()
        finally:
            ceph_gateway.start_gateway()
        # ... and lands everything once the gateway is back: 200 inserts, 10 updates.
        expected = sorted([*range(1, 201), *range(1, 11)])
        _wait(lambda: _lake_ids(ceph_gateway, lake, database) == expected, daemon)
        code, _ = daemon.terminate(30)
        assert code == 0, daemon.run_stderr()
    finally:
        daemon.kill()
    assert _lake_ids(ceph_gateway, lake, database) == expected
    (count,) = server.sql(f"SELECT COUNT(*) FROM {database}.t")[0]
    assert count == "200"
    for secret in _secrets(ceph_gateway, server):
        daemon.assert_secret_never_shown(secret)


def _new_table(server: ServerHandle, prefix: str) -> str:
    """A fresh database holding table ``t`` (id, v); its name."""
    database = unique_db(prefix)
    server.sql(f"CREATE DATABASE {database}; CREATE TABLE {database}.t "
               "(id INT PRIMARY KEY, v VARCHAR(20))")
    return database


def _wait(condition: Any, daemon: DaemonProcess, timeout: float = 120.0) -> None:
    """Poll ``condition`` (reading the lake) until it holds; the daemon must stay alive."""
    import time

    deadline = time.monotonic() + timeout
    while not condition():
        daemon.check_alive()
        assert time.monotonic() < deadline, daemon.run_stderr()[-4000:]
        time.sleep(0.5)
