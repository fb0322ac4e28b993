"""The lake's own failures, server-free: one writer per lake, and filesystem errors that stop.

* ``<lake>/_lock``: a second writer is refused before it touches anything, with the holder's
  pid; ``kill -9`` of the holder frees the lake; readers (``binlake status``) take no lock.
* A real filesystem that fills up (a size-limited tmpfs the test mounts: root only) makes the
  sink raise :class:`~sinks.errors.LakeError` naming ENOSPC and the path, leaves the checkpoint
  where it was durable, refuses more work, and a new sink once space is back lands everything
  exactly once. EROFS (the tmpfs remounted read-only) and EACCES (a writer running as
  ``nobody`` on a directory it may not write) likewise. The daemon maps them to exit code 4.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from replica.cli import EXIT_LAKE, exit_code_for, hint_for
from replica.commands import status
from replica.config import Config, LakeConfig, ReplicaConfig, ServerConfig
from replica.core.backoff import Disposition, classify
from sinks.errors import LakeError, LakeLocked, SinkStateError
from sinks.parquet import ParquetSink, SinkOptions
from sinks.parquet.lock import LakeLock
from tests.tmpfs import mounted_tmpfs, remount
from tests.unit.test_sink_crash import SMALL, assert_no_duplicates, lake_rows, land, workload

REPO = Path(__file__).resolve().parents[2]
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")


# --- one writer per lake ---------------------------------------------------------------------


def test_a_second_writer_is_refused_without_touching_the_lake(tmp_path: Path) -> None:
    lake = str(tmp_path / "lake")
    first = ParquetSink(lake)
    first.open()
    marker = tmp_path / "lake" / "_staging" / "in-flight.parquet"
    marker.write_bytes(b"the first writer's staged file")
    second = ParquetSink(lake)
    with pytest.raises(LakeLocked) as refused:
        second.open()
    assert refused.value.holder_pid == os.getpid()
    assert f"pid {os.getpid()}" in str(refused.value) and lake in str(refused.value)
    assert exit_code_for(refused.value) == EXIT_LAKE == 4
    assert "stop the other `binlake run`" in (hint_for(refused.value) or "")
    assert marker.exists()  # the refused writer did not empty staging
    second.close()  # never opened: a no-op that must not drop the first writer's lock
    with pytest.raises(LakeLocked):
        ParquetSink(lake).open()
    first.close()
    second.open()
    assert not marker.exists()  # the new writer recovered the lake
    second.close()


def test_kill_9_of_the_holder_frees_the_lake(tmp_path: Path) -> None:
    lake = str(tmp_path / "lake")
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys, time
            from sinks.parquet import ParquetSink
            ParquetSink({lake!r}).open()
            print("locked", flush=True)
            time.sleep(60)
        """)], stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"locked\n"
        with pytest.raises(LakeLocked) as refused:
            LakeLock(lake).acquire()
        assert refused.value.holder_pid == holder.pid
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        with LakeLock(lake) as lock:  # the kernel released it
            assert lock.held
            assert Path(lake, "_lock").read_text() == f"{os.getpid()}\n"
    finally:
        holder.kill()
        holder.wait(10)


async def test_status_reads_a_locked_lake(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          ) -> None:
    lake = tmp_path / "lake"
    land(str(lake), workload(transactions=5))
    writer = ParquetSink(str(lake))
    writer.open()
    try:
        config = Config(replica=ReplicaConfig(server_id=5), lake=LakeConfig(path=str(lake)),
                        server=ServerConfig(socket=str(tmp_path / "no.sock")))
        assert await status.run(config) == 1  # the lake's facts, then: the server is down
        assert "checkpoint      transaction 5" in capsys.readouterr().out
    finally:
        writer.close()


# --- lake I/O errors --------------------------------------------------------------------------


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 512 KiB tmpfs mounted for the test (unmounted at teardown)."""
    with mounted_tmpfs(tmp_path / "fs", "512k") as mountpoint:
        yield mountpoint


def _checkpoint(lake: str) -> dict[str, Any] | None:
    try:
        return json.loads(Path(lake, "_checkpoint.json").read_text())  # type: ignore[no-any-return]
    except FileNotFoundError:
        return None


def _land_until_error(lake: str, transactions: list[list[Any]],
                      options: SinkOptions = SMALL) -> tuple[ParquetSink, LakeError]:
    sink = ParquetSink(lake, options)
    sink.open()
    clock = 0.0
    try:
        for items in transactions:
            for item in items:
                sink.handle(item)
            clock += 0.5
            sink.maybe_flush(clock)
        sink.flush()
    except LakeError as exc:
        return sink, exc
    raise AssertionError("the lake never failed")


@root_only
def test_a_full_disk_stops_the_sink_and_a_restart_lands_exactly_once(
        tmpfs: Path, tmp_path: Path) -> None:
    transactions = workload()
    reference = str(tmp_path / "reference")
    land(reference, transactions)
    lake = str(tmpfs / "lake")
    sink, error = _land_until_error(lake, transactions)

    assert error.errno == errno.ENOSPC and error.errno_name == "ENOSPC"
    assert error.path.startswith(lake + "/")
    assert "ENOSPC (errno 28, No space left on device) at " + error.path in str(error)
    assert exit_code_for(error) == EXIT_LAKE
    assert (hint_for(error) or "").startswith("free space")
    assert classify(error) is Disposition.STOP
    # the checkpoint on disk is the sink's durable position: nothing promised is missing
    on_disk = _checkpoint(lake)
    durable = sink.durable_position
    assert on_disk is not None and durable is not None and on_disk["seq"] == durable.seq
    assert 0 < durable.seq < len(transactions)
    with pytest.raises(SinkStateError, match="lake error"):
        sink.handle(transactions[-1][0])
    with pytest.raises(SinkStateError, match="lake error"):
        sink.flush()
    sink.close()  # lands nothing more, releases the lock
    assert _checkpoint(lake) == on_disk

    remount(tmpfs, "size=64m")  # space is back
    land(lake, transactions)  # the whole stream again: what the checkpoint covers is skipped
    rows = lake_rows(lake)
    assert_no_duplicates(rows)
    assert rows == lake_rows(reference)


@root_only
def test_a_read_only_lake_stops_the_sink(tmpfs: Path) -> None:
    lake = str(tmpfs / "lake")
    transactions = workload(transactions=20)
    sink = ParquetSink(lake, SMALL)
    sink.open()
    for item in transactions[0]:
        sink.handle(item)
    first = sink.flush()
    remount(tmpfs, "ro")
    try:
        for item in transactions[1]:
            sink.handle(item)
        with pytest.raises(LakeError) as failed:
            sink.flush()
        assert failed.value.errno == errno.EROFS
        assert "remount it read-write" in (hint_for(failed.value) or "")
        assert exit_code_for(failed.value) == EXIT_LAKE
        assert sink.durable_position is first
        sink.close()
    finally:
        remount(tmpfs, "rw")
    assert _checkpoint(lake)["seq"] == 1  # type: ignore[index]


_AS_NOBODY = """
import json, os, sys
from sinks.errors import LakeError
from sinks.parquet import ParquetSink
from tests.tmpfs import mounted_tmpfs, remount
from tests.unit.test_sink_crash import SMALL, workload
os.setgid(65534); os.setuid(65534)
lake = sys.argv[1]
try:
    sink = ParquetSink(lake, SMALL)
    sink.open()
    transactions = workload(transactions=20)
    for item in transactions[0]:
        sink.handle(item)
    sink.flush()
    os.chmod(lake, 0o555)  # its own directory: now it may not create entries there
    for item in transactions[1]:
        sink.handle(item)
    sink.flush()
    print(json.dumps({"ok": True}))
except LakeError as exc:
    print(json.dumps({"errno": exc.errno, "path": exc.path, "message": str(exc),
                      "durable": sink.durable_position.seq if sink.durable_position else None}))
"""


@root_only
def test_a_lake_the_daemon_may_not_write_stops_the_sink() -> None:
    base = Path(tempfile.mkdtemp(prefix="binlake-eacces-"))  # /tmp: reachable by nobody
    try:
        base.chmod(0o755)
        lake = base / "lake"
        lake.mkdir()
        os.chown(lake, 65534, 65534)
        done = subprocess.run([sys.executable, "-c", _AS_NOBODY, str(lake)],
                              capture_output=True, text=True, cwd=REPO,
                              env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60)
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout)
        assert result["errno"] == errno.EACCES, result
        assert result["path"].startswith(str(lake))
        assert "EACCES (errno 13, Permission denied)" in result["message"]
        assert result["durable"] == 1
        assert _checkpoint(str(lake))["seq"] == 1  # type: ignore[index]
    finally:
        shutil.rmtree(base)
    error = LakeError("/lake", errno.EACCES, "Permission denied", "committing to the lake")
    assert (hint_for(error) or "").startswith("check permissions")


def test_a_bare_filesystem_oserror_is_not_retried() -> None:
    for code in (errno.ENOSPC, errno.EIO, errno.EROFS, errno.EACCES, errno.EPERM):
        assert classify(OSError(code, os.strerror(code))) is Disposition.STOP
    assert classify(ConnectionResetError(errno.ECONNRESET, "reset")) is Disposition.RETRY
    assert classify(OSError(errno.EHOSTUNREACH, "unreachable")) is Disposition.RETRY


def test_lake_error_names_path_errno_and_fix() -> None:
    exc = OSError(28, "Error writing bytes to file. Detail: [errno 28] No space left on device")
    error = LakeError.from_os_error(exc, "/lake/_staging/part-00000001.parquet",
                                    "landing a transaction")
    assert str(error) == ("landing a transaction: ENOSPC (errno 28, No space left on device) "
                          "at /lake/_staging/part-00000001.parquet")
    named = LakeError.from_os_error(PermissionError(13, "Permission denied", "/lake/x"), "/lake",
                                    "committing to the lake")
    assert named.path == "/lake/x" and named.errno_name == "EACCES"
    assert hint_for(LakeError("/l", errno.EIO, "I/O error", "x")) is not None
