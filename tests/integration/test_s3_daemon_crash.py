"""``binlake run`` into a lake on the test bed's Ceph gateway, killed with SIGKILL at random
moments while a workload flows (inserts, key-changing updates, deletes, rollbacks), on MariaDB
10.11 and MySQL 9.7: restarted each time, the lake read through its commit log holds every
change exactly once and replays to ``SELECT`` cell for cell, and after the last, clean run its
data objects are exactly those the log keeps (the interrupted commits' orphans were swept).
The daemon writes a log snapshot every few records, so kills land around snapshots too, every
start reads through them, and the lake as of the newest snapshot and the records after it is
the lake every record gives.

``BINLAKE_S3_CRASH_ITERATIONS`` sets the number of kills (default 6, sized for CI; the issue's proof runs it with 30).
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest

from sinks.objectstore.commit import CommitLog, live_objects
from sinks.objectstore.logstate import read_state, snapshot_numbers
from sinks.objectstore.s3 import S3Settings, open_store
from sinks.objectstore.store import ObjectStore
from sinks.objectstore.view import layout_name
from tests.servers.ceph import CephGateway
from tests.servers.handle import ServerHandle

from .daemon_process import DaemonProcess, daemon_settings, unique_db
from .test_daemon_crash import _Background
from .workload import Workload, compare_lake, read_lake

pytestmark = pytest.mark.s3

ITERATIONS = int(os.environ.get("BINLAKE_S3_CRASH_ITERATIONS", "6"))


def _store(gateway: CephGateway, lake: str) -> ObjectStore:
    return open_store(lake, S3Settings(endpoint=gateway.endpoint, region=gateway.region,
                                       access_key_id=gateway.access_key,
                                       secret_access_key=gateway.secret_key))


def _committed_copy(store: ObjectStore, into: Path) -> Path:
    """The objects the log keeps, copied under their layout names into a fresh directory: the
    lake as binlake's readers see it, readable by the disk tests' helpers."""
    for child in sorted(into.glob("*")) if into.exists() else ():
        raise AssertionError(f"{into} is not fresh: {child}")
    for key in live_objects(CommitLog(store).records()):
        path = into / layout_name(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(store.get(key).data)
    return into


def _data_keys(store: ObjectStore) -> set[str]:
    return {info.key for info in store.list("")
            if not any(part[:1] in "_." for part in info.key.split("/"))}


@pytest.mark.slow
@pytest.mark.parametrize("flavor", ["mariadb_10_11", "mysql_9_7"])
def test_sigkill_into_s3_loses_and_duplicates_nothing(
        flavor: str, request: pytest.FixtureRequest, ceph_gateway: CephGateway,
        s3_bucket: str, tmp_path: Path) -> None:
    server: ServerHandle = request.getfixturevalue(flavor)
    database = unique_db("s3crash")
    lake = f"s3://{s3_bucket}/lake"
    settings = daemon_settings(server, tmp_path / "unused", database, overrides={
        "lake": {"path": lake, "flush_interval": 0.1, "flush_rows": 50},
        "lake.s3": {"endpoint": ceph_gateway.endpoint, "log_snapshot_records": 5}})
    daemon = DaemonProcess(tmp_path, settings, password=server.users["repl"].password,
                           env={**ceph_gateway.s3_env(), "TMPDIR": str(tmp_path)})
    store = _store(ceph_gateway, lake)
    workload = Workload(server, database, seed=2828)
    workload.create_tables()
    rng = random.Random(ITERATIONS)
    records = []
    try:
        with _Background(workload):
            for _ in range(ITERATIONS):
                daemon.start()
                if rng.random() < 0.25:
                    time.sleep(rng.uniform(0.2, 1.5))  # start-up: probe, lease, sweep
                else:
                    daemon.wait_for(r"streaming from", timeout=60)
                    time.sleep(rng.uniform(0.0, 1.0))
                    daemon.check_alive()
                daemon.kill()
                records.append(sum(1 for r in CommitLog(store).records() if r.data_change))
        # Transactions were committed between the kills, never taken back.
        assert records[-1] > 0 and records == sorted(records), records

        daemon.start()
        daemon.wait_for(r"streaming from", timeout=60)
        expected = {t: c for t, c in workload.expected.items() if c}
        deadline = time.monotonic() + 120
        while True:
            copy = _committed_copy(store, tmp_path / f"read-{time.monotonic_ns()}")
            counts = {t: c for t, c in read_lake(copy, database).counts().items() if c}
            if counts == expected:
                break
            daemon.check_alive()
            assert time.monotonic() < deadline, f"{counts} != {expected}"
            time.sleep(1.0)
        code, _took = daemon.terminate(timeout=30)
        assert code == 0, daemon.run_stderr()
    finally:
        daemon.kill()
    assert daemon.runs == ITERATIONS + 1
    compare_lake(server, _committed_copy(store, tmp_path / "final"), workload)
    # After a clean stop the data objects are exactly the committed ones: no orphan is left.
    assert _data_keys(store) == {key for key in live_objects(CommitLog(store).records())
                                 if not any(p[:1] in "_." for p in key.split("/"))}
    # The log's snapshots were written and give what every record gives.
    assert snapshot_numbers(store)
    assert read_state(store).live == live_objects(CommitLog(store).records())
