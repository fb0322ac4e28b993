"""Snapshots of tables keyed by strings whose collation makes different spellings equal, on real
servers, with a writer that changes the spelling of keys while the snapshot reads them:

* ``ci``: ``VARCHAR … COLLATE utf8mb4_general_ci`` (case-insensitive and PAD SPACE on every
  flavor: ``'k05' = 'K05' = 'k05  '``), each key cycling through four spellings by UPDATE, and
  by DELETE + INSERT under another spelling;
* ``cs``: ``VARCHAR … COLLATE utf8mb4_bin``, where ``'k05'`` and ``'K05'`` are two rows that
  must both land (a binary collation keeps them apart).

The interleaving is forced: chunks of 3 rows, and the daemon talks to the server through a
proxy that respells keys of the chunk being read (by UPDATE, and by DELETE + INSERT) after the
chunk's read view was taken and before the binlog position it is consistent with was (MariaDB:
right before the chunk's SELECT, inside its transaction WITH CONSISTENT SNAPSHOT; MySQL: right
before the binlog end read after the SELECT): changes the SELECT does not see and the stream
lands before the chunk — the R rows of those keys must be dropped, whatever spelling the
binlog carries. Besides, after every landed
chunk the writer respells the keys the next chunk will read, the key just read and a key far
ahead, and a third writer respells random keys all the time. Then the lake replayed in
``(_seq, _row)`` order — and, on MariaDB 10.11, Spark's ``read_current_state`` — equals SELECT
exactly (keys compared byte for byte, by HEX), each row was read once.
"""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.servers.handle import ServerHandle

from .daemon_process import DaemonProcess, unique_db
from .proxy import TcpProxy
from .snapshot_check import (
    latest_values,
    readable_through,
    reset_binlogs,
    snapshot_entries,
    snapshot_settings,
    wait_caught_up,
    wait_snapshots_done,
)
from .workload import check_exactly_once, read_lake

pytestmark = pytest.mark.server

ROWS = 30  # keys k00 … k29
CHUNK = 3


def _spelling(base: str, turn: int) -> str:
    return (base, base.upper(), base + " ", base.upper() + "  ")[turn % 4]


def _hex(text: str) -> str:
    return text.encode().hex().upper()


class _Respeller:
    """Changes the spelling of ``ci``'s keys: ``after_chunk`` right after each landed chunk,
    and at random all the time."""

    def __init__(self, server: ServerHandle, database: str, lake: Path) -> None:
        self.server = server
        self.database = database
        self.lake = lake
        self.turns = dict.fromkeys((f"k{i:02d}" for i in range(ROWS)), 0)
        self.changes = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.errors: list[BaseException] = []
        self._threads = [threading.Thread(target=self._guard, args=(f,), daemon=True)
                         for f in (self._after_chunks, self._random)]
        self.forced = 0

    def respell(self, base: str, how: str) -> None:
        with self._lock:  # one statement per key at a time: the turn counter stays exact
            self.turns[base] += 1
            new = _spelling(base, self.turns[base])
            table = f"{self.database}.ci"
            if how == "update":
                self.server.sql(f"UPDATE {table} SET k = X'{_hex(new)}', v = v + 1 "
                                f"WHERE k = '{base}'")
            else:  # the row goes and comes back under another spelling
                self.server.sql(f"BEGIN; SELECT v INTO @v FROM {table} WHERE k = '{base}'; "
                                f"DELETE FROM {table} WHERE k = '{base}'; "
                                f"INSERT INTO {table} VALUES (X'{_hex(new)}', @v + 100); COMMIT")
            self.changes += 1

    def after_read_view(self, request: bytes, previous: bytes) -> None:
        """Respell keys of the ci chunk being read (and of the next two: the checkpoint lags
        and the next chunk is read while one lands) — after the chunk's read view was taken
        and before its position was: MariaDB's chunk SELECT runs in a transaction WITH
        CONSISTENT SNAPSHOT (its read view and binlog point are taken before it), MySQL's is
        followed by SHOW BINARY LOG STATUS."""
        if b"`ci`" not in request and b"BINARY LOG STATUS" not in request:
            return
        entry = snapshot_entries(self.lake).get(f"{self.database}.ci", {})
        if entry.get("status", "running") != "running":
            return
        read = int(entry.get("chunks", 0)) * CHUNK
        for index in range(read, read + 3 * CHUNK):
            if index < ROWS and index % 3 != 0:
                self.respell(f"k{index:02d}", ("update", "move")[index % 2])
                self.forced += 1

    def _guard(self, work: Any) -> None:
        try:
            work()
        except BaseException as exc:  # reported by stop()
            self.errors.append(exc)

    def _after_chunks(self) -> None:
        seen = 0
        name = f"{self.database}.ci"
        while not self._stop.is_set():
            entry = snapshot_entries(self.lake).get(name, {})
            chunks = int(entry.get("chunks", 0))
            if chunks > seen:
                seen = chunks
                read = chunks * CHUNK  # keys k00 … k(read-1) are landed
                for index, how in ((read - 1, "update"), (read, "update"),
                                   (read + 1, "move"), (read + 2, "update"),
                                   (read + 10, "move")):
                    if 0 <= index < ROWS:
                        self.respell(f"k{index:02d}", how)
                self.server.sql(f"UPDATE {self.database}.cs SET v = v + 1 "
                                f"WHERE k = 'k{read % ROWS:02d}'")
            if entry.get("status") == "done":
                return
            time.sleep(0.01)

    def _random(self) -> None:
        rng = random.Random(14)
        while not self._stop.is_set():
            self.respell(f"k{rng.randrange(ROWS):02d}", rng.choice(("update", "move")))
            time.sleep(0.1)

    def __enter__(self) -> _Respeller:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(60)
        if self.errors:
            raise self.errors[0]


def _select(server: ServerHandle, table: str) -> dict[str, int]:
    return {bytes.fromhex(h or "").decode(): int(v or 0)
            for h, v in server.sql(f"SELECT HEX(k), v FROM {table}")}


def _respelled_keys_during_a_snapshot(server: ServerHandle, tmp_path: Path,
                                      spark: Any = None) -> None:
    with TcpProxy("127.0.0.1", server.port) as proxy:
        _respelled_keys_through(server, tmp_path, proxy, spark)


def _respelled_keys_through(server: ServerHandle, tmp_path: Path, proxy: TcpProxy,
                            spark: Any) -> None:
    database = unique_db("snapci")
    lake = tmp_path / "lake"
    keys = [f"k{i:02d}" for i in range(ROWS)]
    server.sql(
        f"CREATE DATABASE {database}; "
        f"CREATE TABLE {database}.ci (k VARCHAR(20) CHARACTER SET utf8mb4 "
        "COLLATE utf8mb4_general_ci PRIMARY KEY, v INT NOT NULL); "
        f"CREATE TABLE {database}.cs (k VARCHAR(20) CHARACTER SET utf8mb4 "
        "COLLATE utf8mb4_bin PRIMARY KEY, v INT NOT NULL); "
        f"INSERT INTO {database}.ci VALUES " + ", ".join(f"('{k}', 0)" for k in keys) + "; "
        f"INSERT INTO {database}.cs VALUES "
        + ", ".join(f"('{k}', 0), ('{k.upper()}', 1000)" for k in keys))
    assert server.sql("SELECT _utf8mb4 'k05' = _utf8mb4 'K05  ' COLLATE utf8mb4_general_ci, "
                      "_utf8mb4 'k05' = _utf8mb4 'K05' COLLATE utf8mb4_bin") == [("1", "0")]
    reset_binlogs(server)
    settings = snapshot_settings(server, lake, database, overrides={
        "start": {"from": "snapshot"},
        "snapshot": {"chunk_rows": CHUNK, "chunk_pause": 0.1}})
    readable_through(settings, server, proxy.port)
    daemon = DaemonProcess(tmp_path, settings, password=server.users["repl"].password)
    names = {f"{database}.ci", f"{database}.cs"}
    marker = f"LIMIT {CHUNK}".encode() if server.is_mariadb else b"SHOW BINARY LOG STATUS"
    with _Respeller(server, database, lake) as writer:
        proxy.before_request(marker, writer.after_read_view)
        daemon.start()
        wait_snapshots_done(lake, names, 120, daemon.check_alive)
        proxy.before_request(marker, None)
    assert writer.forced >= ROWS // CHUNK
    wait_caught_up(server, lake, 60, daemon.check_alive)
    code, _ = daemon.terminate(20)
    assert code == 0, daemon.stderr()
    entries = snapshot_entries(lake)
    changes = read_lake(lake, database)
    # the writer changed only cs's lower-case rows: every upper-case twin was read as it is
    assert sorted(r["k"] for r in changes.rows["cs"] if r["_op"] == "R" and r["k"].isupper()
                  ) == [k.upper() for k in keys]
    check_exactly_once(changes)
    for table in ("ci", "cs"):
        rows = changes.rows[table]
        expected = _select(server, f"{database}.{table}")
        assert latest_values(rows, "k", "v") == expected, table
        reads = [r["k"].rstrip(" ").lower() if table == "ci" else r["k"]
                 for r in rows if r["_op"] == "R"]
        assert len(reads) == len(set(reads)), f"{table}: a row read twice"
        assert len(reads) == entries[f"{database}.{table}"]["rows"]
    assert len(_select(server, f"{database}.ci")) == ROWS
    if spark is not None:
        from sinks.spark.state import read_current_state

        for table in ("ci", "cs"):
            state = read_current_state(spark, str(lake), database, table)
            assert {r["k"]: r["v"] for r in state.collect()} == _select(
                server, f"{database}.{table}"), table


@pytest.mark.spark
def test_respelled_keys_mariadb_10_11(mariadb_10_11: ServerHandle, tmp_path: Path,
                                      spark: Any) -> None:
    _respelled_keys_during_a_snapshot(mariadb_10_11, tmp_path, spark)


def test_respelled_keys_mariadb_11_8(mariadb_11_8: ServerHandle, tmp_path: Path) -> None:
    _respelled_keys_during_a_snapshot(mariadb_11_8, tmp_path)


def test_respelled_keys_mysql_9_7(mysql_9_7: ServerHandle, tmp_path: Path) -> None:
    _respelled_keys_during_a_snapshot(mysql_9_7, tmp_path)
