"""Tables without a usable key: one SELECT, staged in pieces, landed in one commit.

* with a writer on another table throughout, and one change to the keyless table while its
  first read is staged: that read is discarded (its staged pieces removed), the next one lands
  its N rows as ceil(N / chunk_rows) Parquet files of one transaction; changes after it stream
  on; the lake replayed as a multiset from the R rows on (R and I add a row, D removes one)
  equals SELECT;
* ``binlake snapshot`` killed -9 while pieces are staged: nothing of the table is visible, and
  the run that resumes removes the leftovers and lands exactly N R rows, no ``(_seq, _row)``
  twice;
* memory: ``binlake snapshot`` of a keyless table of ~200 MB peaks far below that (its peak
  RSS, its own ``VmHWM`` polled while it runs: 135 MB here, 823 MB before pieces), since it
  holds one piece of
  ``chunk_rows`` rows at a time.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from bench.measure import vm_hwm_kib
from tests.servers.handle import ServerHandle

from .daemon_process import REPO, unique_db
from .snapshot_check import (
    reset_binlogs,
    snapshot_daemon,
    snapshot_entries,
    wait_caught_up,
    wait_snapshots_done,
)
from .test_snapshot_command import _rows, _snapshot
from .test_snapshot_status import _status

pytestmark = pytest.mark.server

#: Rows of the keyless table (several times CHUNK_ROWS, not a multiple of it).
ROWS = int(os.environ.get("BINLAKE_KEYLESS_ROWS", "2150"))
CHUNK_ROWS = 300


def _fill(server: ServerHandle, database: str, rows: int) -> None:
    """``log``: no key at all, and some rows exactly alike (a multiset, not a set)."""
    server.sql(f"CREATE DATABASE {database}; "
               f"CREATE TABLE {database}.log (k INT, v VARCHAR(40), n BIGINT); "
               f"CREATE TABLE {database}.ticks (id INT PRIMARY KEY AUTO_INCREMENT, v INT); "
               f"CREATE TABLE {database}.empty (a INT)")
    values = ", ".join(f"({i % 700}, 'row {i % (rows - 50)}', {i % (rows - 50)})"
                       for i in range(rows))
    server.sql(f"INSERT INTO {database}.log VALUES {values}")
    reset_binlogs(server)


def _staged(lake: Path) -> list[str]:
    return sorted(p.name for p in (lake / "_staging").glob("snapshot-*.arrow"))


def _select(server: ServerHandle, database: str) -> Counter[tuple[Any, ...]]:
    return Counter((None if k is None else int(k), v, None if n is None else int(n))
                   for k, v, n in server.sql(f"SELECT k, v, n FROM {database}.log"))


def _lake_multiset(rows: list[dict[str, Any]]) -> Counter[tuple[Any, ...]]:
    """The keyless table's change log replayed as a multiset of rows: its R rows are the whole
    table as of their point (one ``_seq``), so the replay starts from them and applies the
    changes after them (those before are in the R rows already)."""
    snapshot = max(r["_seq"] for r in rows if r["_op"] == "R")
    state: Counter[tuple[Any, ...]] = Counter()
    for r in rows:
        if r["_seq"] < snapshot:
            continue
        if r["_op"] in ("R", "I"):
            state[(r["k"], r["v"], r["n"])] += 1
        elif r["_op"] == "D":
            b = r["_before"]
            state[(b["k"], b["v"], b["n"])] -= 1
        else:  # U
            b = r["_before"]
            state[(b["k"], b["v"], b["n"])] -= 1
            state[(r["k"], r["v"], r["n"])] += 1
    return +state


def _read_files(lake: Path, database: str) -> list[pq.ParquetFile]:
    return [pq.ParquetFile(p) for p in sorted((lake / database / "log").rglob("*.parquet"))]


@pytest.mark.parametrize("flavor", ["mariadb_10_11", "mariadb_11_8", "mysql_9_7"])
def test_keyless_table_lands_in_pieces_of_one_commit(flavor: str, request: pytest.FixtureRequest,
                                                     tmp_path: Path) -> None:
    server: ServerHandle = request.getfixturevalue(flavor)
    database = unique_db("keyless")
    lake = tmp_path / "lake"
    _fill(server, database, ROWS)
    # pieces 0.25 s apart: the change below comes while the first read still has ~1.7 s to go
    daemon = snapshot_daemon(server, tmp_path, database, "snapshot", chunk_rows=CHUNK_ROWS,
                             chunk_pause=0.25)
    stop = threading.Event()

    def write_ticks() -> None:
        while not stop.is_set():
            server.sql(f"INSERT INTO {database}.ticks (v) VALUES (1); "
                       f"UPDATE {database}.ticks SET v = v + 1 ORDER BY id DESC LIMIT 3")
            time.sleep(0.03)

    writer = threading.Thread(target=write_ticks, daemon=True)
    daemon.start()
    writer.start()
    try:
        # a change while the first read is being staged: that read must not land
        deadline = time.monotonic() + 60
        while not _staged(lake):
            daemon.check_alive()
            assert time.monotonic() < deadline, "no piece staged"
            time.sleep(0.01)
        server.sql(f"INSERT INTO {database}.log VALUES (-1, 'during the read', -1)")
        wait_snapshots_done(lake, {f"{database}.{t}" for t in ("log", "ticks", "empty")},
                            90, daemon.check_alive)
        # after its snapshot, the table's changes stream on
        server.sql(f"INSERT INTO {database}.log VALUES (-2, 'after', -2), (-2, 'after', -2); "
                   f"DELETE FROM {database}.log WHERE k = 3 LIMIT 1; "
                   f"UPDATE {database}.log SET n = n + 1000 WHERE k = 5")
        time.sleep(0.5)
    finally:
        stop.set()
        writer.join(30)
    wait_caught_up(server, lake, 60, daemon.check_alive)
    code, _ = daemon.terminate(20)
    assert code == 0, daemon.stderr()
    stderr = daemon.stderr()
    assert "chunk discarded (the table changed while it was read)" in stderr
    print(next(line for line in stderr.splitlines() if "rows landed in one commit" in line))
    assert "empty: read by one SELECT" not in stderr  # nothing staged, nothing to say
    landed = ROWS + 1
    pieces = math.ceil(landed / CHUNK_ROWS)
    assert (f"its {landed} rows landed in one commit of {pieces} pieces (at most {CHUNK_ROWS} "
            "rows a piece") in stderr
    entry = snapshot_entries(lake)[f"{database}.log"]
    assert (entry["status"], entry["rows"], entry["chunks"]) == ("done", landed, pieces)
    empty = snapshot_entries(lake)[f"{database}.empty"]
    assert (empty["status"], empty["rows"], empty["chunks"]) == ("done", 0, 1)
    assert _staged(lake) == []  # the discarded read's pieces are gone
    rows = _rows(lake, database, "log")
    reads = [r for r in rows if r["_op"] == "R"]
    assert len(reads) == landed
    assert len({(r["_seq"], r["_row"]) for r in rows}) == len(rows)
    assert sorted(r["_row"] for r in reads) == list(range(landed))
    # one transaction, one Parquet file per piece of at most chunk_rows rows
    files = [f for f in _read_files(lake, database)
             if set(f.read(columns=["_op"]).column("_op").to_pylist()) == {"R"}]
    assert len(files) == pieces
    assert {f.metadata.num_rows for f in files} == {CHUNK_ROWS, landed % CHUNK_ROWS}
    assert len({r["_seq"] for r in reads}) == 1
    # the row inserted during the discarded read was streamed (an I before the R rows' _seq)
    # and is in the R rows too: they are the whole table as of their point
    during = [(r["_op"], r["_seq"] < reads[0]["_seq"]) for r in rows if r["k"] == -1]
    assert sorted(during) == [("I", True), ("R", False)]
    # the lake's current state == SELECT, duplicates included
    assert _lake_multiset(rows) == _select(server, database)
    ticks = {}
    for r in _rows(lake, database, "ticks"):
        if r["_op"] == "D":
            ticks.pop(r["id"], None)
        else:
            ticks[r["id"]] = r["v"]
    assert ticks == {int(i or 0): int(v or 0)
                     for i, v in server.sql(f"SELECT id, v FROM {database}.ticks")}


def test_killed_while_pieces_are_staged_resumes_from_scratch(mariadb_10_11: ServerHandle,
                                                             tmp_path: Path) -> None:
    server = mariadb_10_11
    database = unique_db("keylesskill")
    lake = tmp_path / "lake"
    _fill(server, database, ROWS)
    daemon = snapshot_daemon(server, tmp_path, database, "latest", chunk_rows=CHUNK_ROWS,
                             chunk_pause=0.3)
    daemon.settings["log"]["progress_interval"] = 0.5
    daemon.config_path.write_text(daemon._toml())
    name = f"{database}.log"
    argv = [sys.executable, "-m", "replica.cli", "snapshot", "--config",
            str(daemon.config_path), "--table", name]
    log_path = tmp_path / "snapshot.stderr"
    with open(log_path, "wb") as log_file:
        process = subprocess.Popen(argv, env=daemon._env(), cwd=REPO,
                                   stdout=subprocess.DEVNULL, stderr=log_file)
    # kill it once pieces are staged and its progress line says so (read, not landed)
    said = re.compile(rf"snapshot of {name}: 0 rows in 0 chunks landed, [1-9][0-9]* more read "
                      r"and staged \(a table without a key lands when its one read ends\)")
    try:
        deadline = time.monotonic() + 60
        while len(_staged(lake)) < 2 or not said.search(log_path.read_text()):
            assert process.poll() is None, "the command ended before it was killed"
            assert time.monotonic() < deadline, ("no pieces staged", log_path.read_text())
            time.sleep(0.01)
    finally:
        process.kill()
        process.wait()
    leftovers = _staged(lake)
    assert len(leftovers) >= 2
    assert [r for r in _rows(lake, database, "log") if r["_op"] == "R"] == []
    assert snapshot_entries(lake).get(name, {}).get("rows", 0) == 0
    lake_status = json.loads(_status(daemon, "--json"))["lake"]
    assert (lake_status["files"], lake_status["rows"]) == (0, 0)  # staged pieces are not data
    done = _snapshot(daemon, name)
    assert done.returncode == 0, done.stderr
    assert not set(leftovers) & set(_staged(lake)), "leftover pieces not removed"
    entry = snapshot_entries(lake)[name]
    assert (entry["status"], entry["rows"]) == ("done", ROWS)
    rows = _rows(lake, database, "log")
    reads = [r for r in rows if r["_op"] == "R"]
    assert len(reads) == ROWS
    assert len({(r["_seq"], r["_row"]) for r in rows}) == len(rows)
    assert Counter((r["k"], r["v"], r["n"]) for r in reads) == _select(server, database)


#: The memory test's table: rows of ~10 KB, about 200 MB in all.
BIG_ROWS = int(os.environ.get("BINLAKE_KEYLESS_BIG_ROWS", "20000"))
BIG_ROW_BYTES = 10_000


def test_memory_is_bounded_by_the_piece_not_the_table(mariadb_10_11: ServerHandle,
                                                      tmp_path: Path) -> None:
    server = mariadb_10_11
    database = unique_db("keylessbig")
    server.sql(f"CREATE DATABASE {database}; "
               f"CREATE TABLE {database}.big (n INT, body TEXT) ENGINE=InnoDB; "
               f"INSERT INTO {database}.big SELECT seq, CONCAT(seq, REPEAT('x', "
               f"{BIG_ROW_BYTES})) FROM {database}.seq_1_to_{BIG_ROWS}")
    reset_binlogs(server)
    daemon = snapshot_daemon(server, tmp_path, database, "latest", chunk_rows=500)
    argv = [sys.executable, "-m", "replica.cli", "snapshot", "--config",
            str(daemon.config_path), "--table", f"{database}.big"]
    # Peak RSS is the child's own VmHWM, polled while it runs: its ru_maxrss would carry the
    # high-water mark of the (large, late in the suite) pytest process it was forked from.
    with tempfile.TemporaryFile() as err:
        process = subprocess.Popen(argv, env=daemon._env(), cwd=REPO,
                                   stdout=subprocess.DEVNULL, stderr=err)
        peak_kib = 0
        while process.poll() is None:
            peak_kib = max(peak_kib, vm_hwm_kib(process.pid))
            time.sleep(0.002)
        err.seek(0)
        stderr = err.read().decode()
    assert process.returncode == 0, stderr
    entry = snapshot_entries(tmp_path / "lake")[f"{database}.big"]
    assert (entry["status"], entry["rows"], entry["chunks"]) == ("done", BIG_ROWS,
                                                                 math.ceil(BIG_ROWS / 500))
    table_mb = BIG_ROWS * BIG_ROW_BYTES / 1e6
    peak_mb = peak_kib / 1024
    waited = re.search(r"the stream waited ([0-9.]+) s while they were written", stderr)
    assert waited is not None, stderr
    print(f"peak RSS {peak_mb:.0f} MB for a {table_mb:.0f} MB keyless table; the landing "
          f"took {waited[1]} s")
    assert peak_mb < table_mb, f"peak RSS {peak_mb:.0f} MB for a {table_mb:.0f} MB table"
