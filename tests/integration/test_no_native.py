"""binlake installed without a compiler: the native extension is not built, and the daemon must
land the same lake from the pure-Python decoder, snapshot and stream alike.

The other tests run with the extension built (CI requires it), so this is the one that takes
the path a user without gcc gets: a ``sitecustomize`` on the daemon's ``PYTHONPATH`` makes
``protocol.binlog._native_rows`` unimportable, exactly as a missing build does.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.servers.handle import ServerHandle

from .daemon_process import DaemonProcess, trusted_tls, unique_db
from .snapshot_check import (
    compare_snapshot_lake,
    reset_binlogs,
    snapshot_entries,
    snapshot_settings,
    wait_caught_up,
    wait_snapshots_done,
)
from .workload import Workload

pytestmark = pytest.mark.server

_NO_NATIVE = '''
import sys


class _NoNative:
    """Finds the native row decoder, framing and small-file Parquet writer and refuses them,
    as when never built."""

    def find_spec(self, name, path=None, target=None):
        if name in ("protocol.binlog._native_rows", "protocol._native_frames",
                    "sinks.parquet._native_parquet"):
            raise ImportError(f"No module named {name!r}")
        return None


sys.meta_path.insert(0, _NoNative())
'''


def test_daemon_without_native_extension(mariadb_10_11: ServerHandle, tmp_path: Path) -> None:
    server = mariadb_10_11
    blocker = tmp_path / "no_native"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(_NO_NATIVE)
    database = unique_db("nonative")
    lake = tmp_path / "lake"
    workload = Workload(server, database, seed=23)
    workload.create_tables()
    workload.run(40, batch=20)
    reset_binlogs(server)
    settings = snapshot_settings(server, lake, database, overrides={
        "start": {"from": "snapshot"}, "snapshot": {"chunk_rows": 25}})
    settings["server"].update(trusted_tls(server))
    daemon = DaemonProcess(tmp_path, settings, password=server.users["repl"].password,
                           env={"PYTHONPATH": str(blocker)})
    names = {f"{database}.{t}" for t in workload.tables}
    daemon.start()
    wait_snapshots_done(lake, names, 120, daemon.check_alive)
    workload.run(40, batch=5)  # streamed after the snapshot
    wait_caught_up(server, lake, 60, daemon.check_alive)
    code, _ = daemon.terminate(20)
    assert code == 0, daemon.stderr()
    assert "the native row decoder is not built" in daemon.stderr()
    entries = snapshot_entries(lake)
    changes = compare_snapshot_lake(server, lake, workload)
    reads = sum(1 for rows in changes.rows.values() for r in rows if r["_op"] == "R")
    assert reads == sum(entries[n]["rows"] for n in names)
    assert "Traceback" not in daemon.stderr()
