"""One writer per lake on the test bed's Ceph gateway, at the daemon's level: a second ``binlake
run`` on the same ``s3://`` lake never commits.

From MariaDB 10.11, with a workload flowing and a short lease (``lake.s3.lease_duration``):

* a second daemon started while the first runs watches the first's lease, sees it renewed, and
  exits 4 with ``LakeLeased`` and a fix line;
* a third started while the first is stopped (SIGSTOP) does the same once the first, resumed
  (SIGCONT) while the third watches, renews its lease;
* a fourth started while the first is stopped watches the lease run out and takes the lake; the
  first, resumed, finds its next record number taken and exits 4 with ``LakeFenced``.

No wait here rests on a clock: each step waits on what the daemons say in their logs, their
exits and the commit log's records, with generous deadlines. The log holds records of the first
writer and, from its takeover record on, of the fourth only; the lake replays to ``SELECT``
exactly once, and the next clean start and stop leaves no object of the fenced writer.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from sinks.objectstore.commit import CommitLog, Record
from sinks.objectstore.store import ObjectStore
from tests.servers.ceph import CephGateway
from tests.servers.handle import ServerHandle

from .daemon_process import DaemonProcess, unique_db
from .s3_lake import committed_data_keys, data_keys, gateway_store, s3_daemon, wait_for_s3_lake
from .test_daemon_crash import _Background
from .workload import Workload, compare_lake

pytestmark = pytest.mark.s3

#: The first daemon's lease: a taker watches it this long before taking a stopped writer's lake.
LEASE_S = 8.0


def _records(gateway: CephGateway, lake: str) -> list[Record]:
    return list(CommitLog(gateway_store(gateway, lake)).records())


def _refused(daemon: DaemonProcess, error: str) -> list[str]:
    """The daemon exits 4 with ``error`` and a fix line; its error and fix lines."""
    assert daemon.wait(120) == 4, daemon.run_stderr()[-4000:]
    lines = daemon.run_stderr().strip().splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("binlake: error: "))
    assert lines[first].startswith(f"binlake: error: {error}: the lake "), lines[first]
    assert lines[first + 1].startswith("  fix: "), lines[first:]
    return lines[first:first + 2]


def test_a_second_daemon_never_commits(mariadb_10_11: ServerHandle, ceph_gateway: CephGateway,
                                       s3_bucket: str, tmp_path: Path) -> None:
    server, lake = mariadb_10_11, f"s3://{s3_bucket}/lake"
    database = unique_db("s3writers")
    store = gateway_store(ceph_gateway, lake)

    def daemon(name: str) -> DaemonProcess:
        return s3_daemon(server, ceph_gateway, tmp_path / name, lake, [database], name=name,
                         overrides={"lake": {"flush_interval": 0.2},
                                    "lake.s3": {"lease_duration": LEASE_S}})

    first = daemon("first")
    others: list[DaemonProcess] = []

    def started_while_first_stopped(name: str, until: str) -> DaemonProcess:
        """Stop the first daemon, start another, and resume the first once the other's log
        says ``until``."""
        os.kill(first.process.pid, signal.SIGSTOP)  # type: ignore[union-attr]
        try:
            other = daemon(name)
            others.append(other.start())
            other.wait_for(until, timeout=120)
        finally:
            os.kill(first.process.pid, signal.SIGCONT)  # type: ignore[union-attr]
        return other

    workload = Workload(server, database, seed=2830)
    workload.create_tables()
    try:
        first.start()
        first.wait_for(r"streaming from", timeout=60)
        with _Background(workload):
            _wait_records(store, lambda records: any(r.data_change for r in records), first)
            (token,) = {r.writer for r in _records(ceph_gateway, lake)}

            # while the first runs: refused, and the log has no record of it
            second = daemon("second")
            others.append(second.start())
            error, fix = _refused(second, "LakeLeased")
            assert f"(pid {first.process.pid} on " in error  # type: ignore[union-attr]
            assert fix.startswith("  fix: stop the other `binlake run` on this lake first")
            assert "watching its lease" in second.run_stderr()
            first.check_alive()
            assert {r.writer for r in _records(ceph_gateway, lake)} == {token}

            # while the first is stopped, resumed while the third watches: refused
            third = started_while_first_stopped("third", r"watching its lease")
            _refused(third, "LakeLeased")
            first.check_alive()
            assert {r.writer for r in _records(ceph_gateway, lake)} == {token}

            # stopped past its lease: the fourth takes the lake, the first is fenced
            committed = len(_records(ceph_gateway, lake))
            fourth = started_while_first_stopped("fourth", r"streaming from")
            error, fix = _refused(first, "LakeFenced")
            assert "was taken over by another writer" in error
            assert fix.startswith("  fix: another `binlake run` now writes this lake")
        records = _records(ceph_gateway, lake)
        assert [r.number for r in records] == list(range(1, len(records) + 1))
        (takeover,) = [r for r in records[committed:] if r.takeover]
        assert {r.writer for r in records[:takeover.number - 1]} == {token}
        assert {r.writer for r in records[takeover.number - 1:]} == {takeover.writer} != {token}

        copy = wait_for_s3_lake(store, workload, fourth, tmp_path)
        code, _ = fourth.terminate(30)
        assert code == 0, fourth.run_stderr()
        compare_lake(server, copy, workload)
        # the fenced writer may have put objects after the fourth's start swept: the next start
        # removes them, and after its clean stop only committed data objects are left
        fourth.start().wait_for(r"streaming from", timeout=60)
        code, _ = fourth.terminate(30)
        assert code == 0, fourth.run_stderr()
        assert data_keys(store) == committed_data_keys(store)
    finally:
        if first.running:
            os.kill(first.process.pid, signal.SIGCONT)  # type: ignore[union-attr]
        for process in (first, *others):
            process.kill()


def _wait_records(store: ObjectStore, condition: Callable[[list[Record]], bool],
                  daemon: DaemonProcess) -> None:
    """Poll the commit log until ``condition`` holds of its records; the daemon must run."""
    deadline = time.monotonic() + 120
    while not condition(list(CommitLog(store).records())):
        daemon.check_alive()
        assert time.monotonic() < deadline, daemon.run_stderr()[-4000:]
        time.sleep(0.2)
