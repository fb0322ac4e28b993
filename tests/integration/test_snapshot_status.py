"""Snapshot progress where an operator looks, on MariaDB 10.11: ``binlake status`` (text and
``--json``) shows each table's snapshot state from the checkpoint — mid-way after a kill -9
(running, rows and chunks landed, the last key) and once done — and the daemon logs a progress
line per table being read every ``log.progress_interval``."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.servers.handle import ServerHandle

from .daemon_process import REPO, DaemonProcess, unique_db
from .snapshot_check import reset_binlogs, snapshot_entries, snapshot_settings, wait_snapshots_done

pytestmark = pytest.mark.server

ROWS = 40
CHUNK = 5


def _status(daemon: DaemonProcess, *flags: str) -> str:
    done = subprocess.run([sys.executable, "-m", "replica.cli", "status", "--config",
                           str(daemon.config_path), "--no-server", *flags], env=daemon._env(),
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_status_and_the_log_show_snapshot_progress(mariadb_10_11: ServerHandle,
                                                   tmp_path: Path) -> None:
    server = mariadb_10_11
    database = unique_db("snapstat")
    name = f"{database}.t"
    server.sql(f"CREATE DATABASE {database}; CREATE TABLE {name} (id INT PRIMARY KEY, v INT); "
               f"INSERT INTO {name} VALUES " + ", ".join(f"({i}, {i})" for i in range(1, ROWS + 1)))
    reset_binlogs(server)
    lake = tmp_path / "lake"
    settings = snapshot_settings(server, lake, database, overrides={
        "start": {"from": "snapshot"}, "snapshot": {"chunk_rows": CHUNK, "chunk_pause": 0.4},
        "log": {"progress_interval": 0.5}})
    daemon = DaemonProcess(tmp_path, settings, password=server.users["repl"].password)
    daemon.start()
    deadline = time.monotonic() + 60
    while snapshot_entries(lake).get(name, {}).get("chunks", 0) < 2:
        daemon.check_alive()
        assert time.monotonic() < deadline, snapshot_entries(lake)
        time.sleep(0.02)
    daemon.kill()
    chunks = snapshot_entries(lake)[name]["chunks"]
    assert 2 <= chunks < ROWS // CHUNK
    text = _status(daemon)
    assert "  snapshots       1 table: 1 running\n" in text
    assert (f"    {name}  running  {chunks * CHUNK} rows in {chunks} chunks, "
            f"last key {chunks * CHUNK}\n") in text
    doc = json.loads(_status(daemon, "--json"))
    assert doc["snapshots"] == [{"table": name, "status": "running", "rows": chunks * CHUNK,
                                 "chunks": chunks, "last_key": [str(chunks * CHUNK)],
                                 "one_time": False, "message": None,
                                 "reason": "start.from = snapshot", "condition": None}]

    daemon.start()
    wait_snapshots_done(lake, {name}, 120, daemon.check_alive)
    code, _ = daemon.terminate(20)
    assert code == 0, daemon.stderr()
    lines = re.findall(rf"snapshot of {re.escape(name)}: (\d+) rows in (\d+) chunks?, "
                       r"last key (\d+) landed", daemon.stderr())
    assert len(lines) >= 2, daemon.stderr()
    assert all(int(r) == int(c) * CHUNK == int(k) for r, c, k in lines), lines
    text = _status(daemon)
    assert "  snapshots       1 table: 1 done\n" in text
    # 8 full chunks, then an empty one says the table is done
    assert f"    {name}  done     {ROWS} rows in {ROWS // CHUNK + 1} chunks, last key {ROWS}\n" \
        in text
    assert json.loads(_status(daemon, "--json"))["snapshots"][0]["status"] == "done"
