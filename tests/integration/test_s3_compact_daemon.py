"""``binlake run`` compacting its own lake on the test bed's Ceph gateway (``lake.compact_interval``)
while MariaDB 10.11 runs a workload (inserts, key-changing updates, deletes, rollbacks): the log
holds the daemon's compaction records between its own commits, ``binlake status`` counts fewer
files than the daemon wrote, what a compaction replaced is deleted once ``lake.compact_grace``
has passed, a killed compaction's files are removed at the next start, and the lake read through
its log replays to ``SELECT`` with every change exactly once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sinks.errors import ObjectMissing
from sinks.objectstore.commit import CommitLog, Record, live_objects
from sinks.objectstore.store import ObjectStore
from tests.servers.ceph import CephGateway
from tests.servers.handle import ServerHandle

from .daemon_process import DaemonProcess, daemon_settings, unique_db
from .s3_lake import committed_copy, data_keys, gateway_store
from .test_daemon_crash import _Background
from .workload import Workload, compare_lake, read_lake

pytestmark = pytest.mark.s3

#: Seconds the workload runs while the daemon lands and compacts.
WORKLOAD_SECONDS = float(os.environ.get("BINLAKE_S3_COMPACT_SECONDS", "8"))


def _status(gateway: CephGateway, lake: str, tmp_path: Path) -> dict[str, Any]:
    """``binlake status --json --no-server`` of the lake, run as an operator would."""
    (tmp_path / "empty.toml").touch()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BINLAKE_", "AWS_"))}
    env |= gateway.s3_env() | {"BINLAKE_LAKE_S3_ENDPOINT": gateway.endpoint,
                               "BINLAKE_CONFIG": str(tmp_path / "empty.toml")}
    done = subprocess.run([sys.executable, "-m", "replica.cli", "status", "--lake", lake,
                           "--json", "--no-server"], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    status: dict[str, Any] = json.loads(done.stdout)
    return status


def _compactions(records: list[Record]) -> list[Record]:
    return [r for r in records if r.compaction and r.adds]


def _is_data(key: str) -> bool:
    return key.endswith(".parquet") and not any(p[:1] in "_." for p in key.split("/"))


def _wait(condition: Callable[[], bool], daemon: DaemonProcess, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        daemon.check_alive()
        assert time.monotonic() < deadline, daemon.run_stderr()[-4000:]
        time.sleep(0.5)


def test_the_daemon_compacts_its_s3_lake_in_the_background(
        mariadb_10_11: ServerHandle, ceph_gateway: CephGateway, s3_bucket: str,
        tmp_path: Path) -> None:
    server, lake = mariadb_10_11, f"s3://{s3_bucket}/lake"
    database = unique_db("s3bgcompact")
    settings = daemon_settings(server, tmp_path / "unused", database, overrides={
        "lake": {"path": lake, "flush_interval": 0.1, "flush_rows": 50,
                 "compact_interval": 2.0, "compact_min_age": 0.0, "compact_grace": 0.0},
        "lake.s3": {"endpoint": ceph_gateway.endpoint}})
    daemon = DaemonProcess(tmp_path, settings, password=server.users["repl"].password,
                           env={**ceph_gateway.s3_env(), "TMPDIR": str(tmp_path)})
    store: ObjectStore = gateway_store(ceph_gateway, lake)
    workload = Workload(server, database, seed=2829)
    workload.create_tables()
    try:
        daemon.start()
        daemon.wait_for(r"streaming from", timeout=60)
        with _Background(workload):
            # The daemon's commits and its compactions interleave in one log.
            _wait(lambda: bool(_compactions(list(CommitLog(store).records()))), daemon)
            time.sleep(WORKLOAD_SECONDS)
            daemon.check_alive()
        expected = {t: c for t, c in workload.expected.items() if c}

        def caught_up() -> bool:
            try:
                copy = committed_copy(store, tmp_path / f"read-{time.monotonic_ns()}")
            except ObjectMissing:  # replaced and deleted meanwhile (no grace here): read again
                return False
            return {t: c for t, c in read_lake(copy, database).counts().items() if c} == expected

        _wait(caught_up, daemon)
        # Quiet now: the next runs leave at most one daemon file per partition.
        def compacted() -> bool:
            names = [k for k in live_objects(CommitLog(store).records()) if _is_data(k)]
            parts: dict[str, int] = {}
            for key in names:
                if os.path.basename(key).startswith("part-"):
                    parts[os.path.dirname(key)] = parts.get(os.path.dirname(key), 0) + 1
            return all(n <= 1 for n in parts.values())

        _wait(compacted, daemon)
        code, _ = daemon.terminate(30)
        assert code == 0, daemon.run_stderr()
    finally:
        daemon.kill()
    stderr = daemon.run_stderr()
    assert "background compaction failed" not in stderr, stderr[-4000:]
    records = list(CommitLog(store).records())
    written = sum(1 for r in records if r.data_change for k in r.adds if _is_data(k))
    live = {k for k in live_objects(records) if _is_data(k)}
    status = _status(ceph_gateway, lake, tmp_path)
    assert status["lake"]["files"] == len(live) < written, (status["lake"], written)
    assert status["lake"]["rows"] == sum(sum(c.values()) for c in expected.values())
    # Replaced files are deleted once the grace period (0 here) has passed, at the next run;
    # the last run's are kept for readers until the run after it.
    compactions = _compactions(records)
    assert len(compactions) >= 2
    assert any(r.data_change and r.number > compactions[0].number for r in records)
    for record in compactions[:-1]:
        assert all(store.head(k) is None for k in record.removes), record.number
    # A killed compaction's file (no record names it) is left for the next start.
    partition = os.path.dirname(next(iter(sorted(live))))
    orphan = f"{partition}/compacted-g{records[-1].number:08d}-{0:016d}-000-cdeadbeef.parquet"
    store.put(orphan, b"not parquet: a killed compaction's upload")

    # The next start's first compaction removes the killed compaction's file behind a fence.
    daemon.start()
    try:
        _wait(lambda: store.head(orphan) is None, daemon, timeout=60)
        code, _ = daemon.terminate(30)
        assert code == 0, daemon.run_stderr()
    finally:
        daemon.kill()
    records = list(CommitLog(store).records())
    assert any(r.compaction and not r.adds and not r.removes for r in records)  # the fence
    kept = {k for r in _compactions(records)[-1:] for k in r.removes}
    assert data_keys(store) - kept == {k for k in live_objects(records) if _is_data(k)}
    compare_lake(server, committed_copy(store, tmp_path / "final"), workload)
