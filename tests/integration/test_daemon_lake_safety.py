"""The lake's own failures through ``binlake run`` on MariaDB 10.11.

* A real small filesystem (a size-limited tmpfs the test mounts; root only) fills up while
  changes flow: the daemon exits 4 with one line naming ENOSPC and the path and a ``fix:`` line;
  once space is back, a restart lands the rest and the lake equals the source, exactly once.
* With semi-sync ack-after-land, the commit the full disk kept out of the lake is never
  acknowledged (the server counts it as a semi-sync timeout), the ones before it were.
* The final flush at SIGTERM failing on a full disk is exit 4 too, not a clean stop.
* One writer per lake: a second ``binlake run`` on a lake in use exits 4 naming the holder's pid;
  after ``kill -9`` of the first, the second starts and the lake equals the source.
"""

from __future__ import annotations

import errno
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.servers.handle import ServerHandle
from tests.tmpfs import mounted_tmpfs

from .daemon_process import (
    DaemonProcess,
    daemon_settings,
    http_get,
    read_checkpoint,
    unique_db,
)
from .workload import Workload, compare_lake, read_lake, wait_for_lake

pytestmark = pytest.mark.server


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs, unmounted at teardown."""
    with mounted_tmpfs(tmp_path / "fs", "4m") as mountpoint:
        yield mountpoint


def _fill(mountpoint: Path) -> Path:
    """Fill the filesystem to the last byte with a ballast file."""
    ballast = mountpoint / "ballast"
    chunk = b"\0" * 65536
    with open(ballast, "wb", buffering=0) as f:
        while True:
            try:
                f.write(chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                break
        while True:  # the last partial chunk
            try:
                f.write(b"\0" * 512)
            except OSError:
                break
    return ballast


def test_a_full_disk_exits_4_and_a_restart_lands_exactly_once(
        mariadb_10_11: ServerHandle, small_fs: Path, tmp_path: Path) -> None:
    server = mariadb_10_11
    database = unique_db("lake_full")
    lake = small_fs / "lake"
    settings = daemon_settings(server, lake, database,
                               overrides={"lake": {"flush_interval": 0.2}})
    daemon = DaemonProcess(tmp_path, settings, password=server.users["repl"].password)
    workload = Workload(server, database, seed=12)
    workload.create_tables()
    daemon.start()
    daemon.wait_for(r"streaming from")
    workload.run(40, batch=10)
    wait_for_lake(lake, workload, timeout=30, alive=daemon.check_alive)
    landed = read_checkpoint(lake)
    assert landed is not None

    ballast = _fill(small_fs)
    workload.run(40, batch=10)  # more changes arrive: landing them needs space
    code = daemon.wait(30)
    stderr = daemon.run_stderr()
    assert code == 4, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("binlake: error: ")]
    assert len(errors) == 1, stderr
    assert re.fullmatch(rf"binlake: error: LakeError: .*: ENOSPC \(errno 28, No space left on "
                        rf"device\) at {re.escape(str(lake))}/\S+", errors[0]), errors[0]
    assert "  fix: free space (or raise the quota) on the lake's filesystem, then start binlake " \
           "again: it resumes from the lake's last checkpoint" in stderr
    assert "reconnecting" not in stderr  # a full disk is not a network error
    stopped_at = read_checkpoint(lake)
    assert stopped_at is not None and stopped_at["seq"] >= landed["seq"]

    ballast.unlink()  # space is back
    daemon.start()
    daemon.wait_for(rf"resuming after transaction {stopped_at['seq']} ")
    wait_for_lake(lake, workload, timeout=60, alive=daemon.check_alive)
    code, _took = daemon.terminate(timeout=15)
    assert code == 0, daemon.run_stderr()
    compare_lake(server, lake, workload)


def test_a_second_daemon_on_the_lake_is_refused_until_the_first_dies(
        mariadb_10_11: ServerHandle, tmp_path: Path) -> None:
    server = mariadb_10_11
    database = unique_db("lake_lock")
    lake = tmp_path / "lake"
    password = server.users["repl"].password
    first = DaemonProcess(tmp_path, daemon_settings(server, lake, database), password=password,
                          name="first")
    second = DaemonProcess(tmp_path, daemon_settings(server, lake, database), password=password,
                           name="second")
    workload = Workload(server, database, seed=13)
    workload.create_tables()
    first.start()
    first.wait_for(r"streaming from")
    workload.run(20, batch=10)

    second.start()
    assert second.wait(30) == 4, second.run_stderr()
    stderr = second.run_stderr()
    assert first.process is not None
    assert (f"binlake: error: LakeLocked: the lake {lake} is in use by another writer "
            f"(pid {first.process.pid} holds {lake}/_lock)") in stderr, stderr
    assert f"  fix: stop the other `binlake run` (pid {first.process.pid})" in stderr
    assert "streaming from" not in stderr and "resuming" not in stderr
    first.check_alive()

    first.kill()  # kill -9: the kernel drops the lock
    workload.run(20, batch=10)
    second.start()
    second.wait_for(r"streaming from")
    wait_for_lake(lake, workload, timeout=60, alive=second.check_alive)
    code, _took = second.terminate(timeout=15)
    assert code == 0, second.run_stderr()
    compare_lake(server, lake, workload)


def _status(server: ServerHandle, name: str) -> int:
    return int(str(server.sql(f"SHOW GLOBAL STATUS LIKE '{name}'")[0][1]))


def test_no_semi_sync_ack_for_what_a_full_disk_kept_from_landing(
        server_factory: Any, small_fs: Path, tmp_path: Path) -> None:
    """ack-after-land on a semi-sync MariaDB 10.11: every commit is acknowledged once landed;
    the one the full disk kept out of the lake is never acknowledged (the server times out)."""
    server = server_factory.start(
        "mariadb-10.11",
        ["--rpl-semi-sync-master-enabled=ON", "--rpl-semi-sync-master-timeout=2000"],
        name="s4-semi-sync")  # shared with test_session_servers
    database = unique_db("lake_ack")
    lake = small_fs / "lake"
    settings = daemon_settings(server, lake, database,
                               overrides={"semi_sync": {"mode": "ack-after-land"}})
    daemon = DaemonProcess(tmp_path, settings, password=server.users["repl"].password)
    daemon.start()
    daemon.wait_for(r"streaming from")
    server.sql(f"CREATE DATABASE {database}; CREATE TABLE {database}.t (id INT PRIMARY KEY)")
    yes, no = _status(server, "Rpl_semi_sync_master_yes_tx"), \
        _status(server, "Rpl_semi_sync_master_no_tx")
    for row in (1, 2, 3):
        server.sql(f"INSERT INTO {database}.t VALUES ({row})")
    assert _status(server, "Rpl_semi_sync_master_yes_tx") - yes == 3  # landed, then ACKed

    ballast = _fill(small_fs)
    started = time.monotonic()
    server.sql(f"INSERT INTO {database}.t VALUES (4)")  # cannot land: waits for the timeout
    assert time.monotonic() - started >= 1.5
    assert daemon.wait(30) == 4, daemon.run_stderr()
    assert "ENOSPC" in daemon.run_stderr()
    assert _status(server, "Rpl_semi_sync_master_yes_tx") - yes == 3  # no ACK for row 4
    assert _status(server, "Rpl_semi_sync_master_no_tx") - no == 1
    assert sorted(r["id"] for r in read_lake(lake, database).rows["t"]) == [1, 2, 3]

    ballast.unlink()
    daemon.start()
    deadline = time.monotonic() + 30
    while sorted(r["id"] for r in read_lake(lake, database).rows.get("t", [])) != [1, 2, 3, 4]:
        daemon.check_alive()
        assert time.monotonic() < deadline, read_lake(lake, database).rows
        time.sleep(0.2)
    code, _took = daemon.terminate(timeout=15)
    assert code == 0, daemon.run_stderr()
    changes = read_lake(lake, database).rows["t"]
    assert [(r["_op"], r["id"]) for r in changes] == [("I", 1), ("I", 2), ("I", 3), ("I", 4)]


def _xid_events(metrics_url: str) -> float:
    _status_code, body = http_get(f"{metrics_url}/metrics")
    found = re.search(r'^binlake_events_total\{type="XidEvent"\} (\S+)$', body, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def test_a_full_disk_at_the_sigterm_flush_exits_4(
        mariadb_10_11: ServerHandle, small_fs: Path, tmp_path: Path) -> None:
    """The last flush, at SIGTERM, fails on a full disk: exit 4 and the line, not a clean 0;
    the restart lands what it could not, exactly once."""
    server = mariadb_10_11
    database = unique_db("lake_stop")
    lake = small_fs / "lake"
    settings = daemon_settings(server, lake, database,  # no flush before the SIGTERM
                               overrides={"lake": {"flush_interval": 600.0}})
    daemon = DaemonProcess(tmp_path, settings, password=server.users["repl"].password)
    workload = Workload(server, database, seed=14)
    workload.create_tables()
    daemon.start()
    daemon.wait_for(r"streaming from")
    url = daemon.metrics_url()
    before = _xid_events(url)
    workload.run(10, batch=10)
    commits = workload.transactions - workload.rollbacks
    _wait_received(daemon, url, before + commits)  # every transaction received, none landed
    assert read_lake(lake, database).rows == {}

    ballast = _fill(small_fs)
    code, _took = daemon.terminate(timeout=15)
    stderr = daemon.run_stderr()
    assert code == 4, stderr
    assert re.search(r"^binlake: error: LakeError: committing to the lake: ENOSPC \(errno 28",
                     stderr, re.MULTILINE), stderr
    assert read_lake(lake, database).rows == {}

    ballast.unlink()
    daemon.start()
    daemon.wait_for(r"streaming from")
    _wait_received(daemon, daemon.metrics_url(), commits)
    code, _took = daemon.terminate(timeout=15)  # this time the flush at SIGTERM lands it all
    assert code == 0, daemon.run_stderr()
    compare_lake(server, lake, workload)


def _wait_received(daemon: DaemonProcess, url: str, commits: float) -> None:
    deadline = time.monotonic() + 20
    while _xid_events(url) < commits:
        daemon.check_alive()
        assert time.monotonic() < deadline, "the daemon did not receive the transactions"
        time.sleep(0.1)
