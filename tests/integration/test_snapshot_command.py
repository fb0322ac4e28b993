"""``binlake snapshot`` and automatic snapshots of tables new in ``filter.include``, on a real
server whose binlogs were reset after the tables were filled:

1. no daemon, a lake without checkpoint: the command streams, snapshots an included table, a
   table without any key and a table the filters exclude (a one-time copy, said so), exits 0;
2. a daemon runs (a writer changes the tables throughout): the command asks it, waits, exits 0
   while the daemon keeps streaming;
3. ``filter.include`` gains a table: the restarted daemon snapshots it by itself;
4. the lake's state of every keyed table == SELECT, cell for cell; the keyless and excluded
   tables' R rows are exactly their rows.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.servers.handle import ServerHandle

from .daemon_process import REPO, DaemonProcess, trusted_tls, unique_db
from .snapshot_check import (
    Writer,
    compare_snapshot_lake,
    reset_binlogs,
    snapshot_entries,
    snapshot_settings,
    wait_caught_up,
    wait_snapshots_done,
)
from .workload import TABLES, Workload

pytestmark = pytest.mark.server


def _snapshot(daemon: DaemonProcess, *tables: str, timeout: float = 120
              ) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "replica.cli", "snapshot", "--config",
            str(daemon.config_path)]
    for table in tables:
        argv += ["--table", table]
    return subprocess.run(argv, env=daemon._env(), cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)


def _rows(lake: Path, database: str, table: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for path in sorted((lake / database / table).rglob("*.parquet")):
        rows.extend(pq.read_table(path).to_pylist())
    return sorted(rows, key=lambda r: (r["_seq"], r["_row"]))


def _command_and_new_tables(server: ServerHandle, tmp_path: Path) -> None:
    database = unique_db("snapcmd")
    lake = tmp_path / "lake"
    # The tables filter.include names below (the others would not land).
    workload = Workload(server, database, seed=41, tables=tuple(
        t for t in TABLES if t.name in ("numbers", "texts", "times")))
    workload.create_tables()
    workload.run(60, batch=30)
    server.sql(
        "CREATE TABLE nokey (a INT, b VARCHAR(20)); "
        "INSERT INTO nokey VALUES (1, 'one'), (1, 'one'), (2, NULL), (NULL, 'x'); "
        "CREATE TABLE excl (id INT PRIMARY KEY, v VARCHAR(10)); "
        "INSERT INTO excl VALUES (1, 'a'), (2, 'b'), (3, 'c')", database=database)
    reset_binlogs(server)
    include = [f"{database}.numbers", f"{database}.texts", f"{database}.nokey"]
    settings = snapshot_settings(server, lake, database, overrides={
        "start": {"from": "latest"}, "snapshot": {"chunk_rows": 30},
        "filter": {"include": include}})
    settings["server"].update(trusted_tls(server))
    daemon = DaemonProcess(tmp_path, settings, password=server.users["repl"].password)

    # 1. no daemon: the command is the writer for a while, on a lake without checkpoint
    done = _snapshot(daemon, f"{database}.numbers", f"{database}.nokey", f"{database}.excl")
    assert done.returncode == 0, done.stderr
    assert f"{database}.excl is excluded by the filters" in done.stderr
    assert "one-time copy" in done.stderr
    entries = snapshot_entries(lake)
    counts = {t: int(server.sql(f"SELECT COUNT(*) FROM {database}.{t}")[0][0] or 0)
              for t in ("numbers", "nokey", "excl")}
    assert {t: entries[f"{database}.{t}"]["rows"] for t in counts} == counts
    assert entries[f"{database}.excl"]["one_time"] is True
    assert entries[f"{database}.nokey"]["chunks"] == 1  # no key: read whole
    nokey = Counter((r["a"], r["b"]) for r in _rows(lake, database, "nokey"))
    assert nokey == Counter({(1, "one"): 2, (2, None): 1, (None, "x"): 1})
    assert [(r["_op"], r["id"], r["v"]) for r in _rows(lake, database, "excl")] == [
        ("R", 1, "a"), ("R", 2, "b"), ("R", 3, "c")]

    # 2. a daemon runs, a writer writes: the command asks the daemon and waits
    with Writer(workload) as writer:
        daemon.start()
        daemon.wait_for("streaming from")
        done = _snapshot(daemon, f"{database}.texts")
        assert done.returncode == 0, done.stderr
        assert "asked it to snapshot" in done.stderr
        assert snapshot_entries(lake)[f"{database}.texts"]["status"] == "done"
        daemon.check_alive()
        code, _ = daemon.terminate(20)
        assert code == 0, daemon.stderr()
        assert "snapshot requested" in daemon.stderr()

        # 3. filter.include gains a table: the daemon snapshots it when it starts
        daemon.settings["filter"]["include"] = [*include, f"{database}.times"]
        daemon.config_path.write_text(daemon._toml())
        daemon.start()
        wait_snapshots_done(lake, {f"{database}.times"}, 120, daemon.check_alive)
        assert "filter.include gained 1 tables" in daemon.stderr()
        writer.stop()
        assert writer.transactions > 0
    server.sql(f"INSERT INTO {database}.excl VALUES (4, 'd')")  # not landed: excluded
    wait_caught_up(server, lake, 60, daemon.check_alive)
    code, _ = daemon.terminate(20)
    assert code == 0, daemon.stderr()

    # 4. every keyed table == SELECT
    compare_snapshot_lake(server, lake, workload)
    assert len(_rows(lake, database, "excl")) == 3
    assert "Traceback" not in daemon.stderr() + done.stderr


def test_snapshot_command_and_new_tables_mariadb_10_11(mariadb_10_11: ServerHandle,
                                                       tmp_path: Path) -> None:
    _command_and_new_tables(mariadb_10_11, tmp_path)


def test_snapshot_command_and_new_tables_mysql_9_7(mysql_9_7: ServerHandle,
                                                   tmp_path: Path) -> None:
    _command_and_new_tables(mysql_9_7, tmp_path)
