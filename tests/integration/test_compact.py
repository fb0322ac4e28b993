"""Compaction on a real MariaDB 10.11 lake of thousands of small files (one per transaction).

* daemon stopped: ``binlake compact`` killed -9 mid-way (nothing visible twice, nothing
  missing), the daemon's start cleans up its leftovers, rerun → files down ≥ 10×, every column of every row identical, Spark current state
  == SELECT, then from a materialised state as well;
* daemon running and writing: compactions beside it while a reader polls the directory
  (never a duplicate) and a streaming query started before them delivers every row once.

Sized by ``BINLAKE_COMPACT_FILES`` (transactions, so files; default 2000 — the daemon-stopped
and daemon-running tests take about a minute each on the busy 2-core test machine; each file is
a commit, on a tmpfs lake when run as root so that its fsyncs do not dominate).
"""

from __future__ import annotations

import dataclasses
import glob
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import trio

from sinks.spark.readers import read_changes, stream_changes
from sinks.spark.state import materialize_state, read_current_state
from tests.servers.handle import ServerHandle

from .daemon_process import (
    REPO,
    STOP_TIMEOUT,
    DaemonProcess,
    binlog_end,
    catch_up,
    catch_up_config,
    daemon_settings,
    read_checkpoint,
    unique_db,
)

pytestmark = [pytest.mark.server, pytest.mark.spark]

FILES = int(os.environ.get("BINLAKE_COMPACT_FILES", "2000"))
TABLES = ("t0", "t1", "t2")


class Writer:
    """Autocommit INSERT/UPDATE/DELETE statements, one row each, over a few tables; knows the
    rows it changed, so the lake's row count is exact."""

    def __init__(self, server: ServerHandle, database: str, seed: int) -> None:
        self.server = server
        self.database = database
        self.rng = random.Random(seed)
        self.live: dict[str, list[int]] = {t: [] for t in TABLES}
        self.next_id = 1
        self.changes = 0
        server.sql(f"CREATE DATABASE {database}; " + " ".join(
            f"CREATE TABLE {database}.{t} (id INT PRIMARY KEY, v INT, s VARCHAR(20));"
            for t in TABLES))

    def statements(self, count: int, tables: tuple[str, ...] = TABLES) -> str:
        out = []
        for _ in range(count):
            table = self.rng.choice(tables)
            live = self.live[table]
            roll = self.rng.random()
            if live and roll < 0.3:
                key = self.rng.choice(live)
                out.append(f"UPDATE {self.database}.{table} SET v = v + 1, "
                           f"s = 'u{self.rng.randrange(1000)}' WHERE id = {key};")
            elif live and roll < 0.4:
                key = live.pop(self.rng.randrange(len(live)))
                out.append(f"DELETE FROM {self.database}.{table} WHERE id = {key};")
            else:
                live.append(self.next_id)
                out.append(f"INSERT INTO {self.database}.{table} VALUES "
                           f"({self.next_id}, {self.rng.randrange(100)}, 's{self.next_id}');")
                self.next_id += 1
        self.changes += count
        return "\n".join(out)

    def run(self, count: int, tables: tuple[str, ...] = TABLES) -> None:
        for start in range(0, count, 200):
            self.server.sql(self.statements(min(200, count - start), tables))


@pytest.fixture
def lake(tmp_path: Path) -> Iterator[Path]:
    """The lake's directory: on a tmpfs when the tests run as root (thousands of one-file
    commits cost an fsync each, which a busy disk makes the bulk of the test's time; tmpfs has
    renameat2's exchange and hard links like ext4), else under ``tmp_path``."""
    mountpoint = tmp_path / "fs"
    mountpoint.mkdir()
    mounted = os.geteuid() == 0 and subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1g", "tmpfs", str(mountpoint)],
        capture_output=True).returncode == 0
    try:
        yield mountpoint / "lake"
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(mountpoint)], check=True)


def data_files(lake: Path) -> list[str]:
    return sorted(glob.glob(str(lake / "*" / "*" / "schema_version=*" / "*" / "*.parquet")))


def lake_rows(lake: Path) -> list[dict[str, Any]]:
    """Every landed row, every column, in (table, _seq, _row) order."""
    out: list[dict[str, Any]] = []
    for path in data_files(lake):
        table = path.split(os.sep)[-4]
        out += [{"table": table, **r} for r in pq.read_table(path).to_pylist()]
    return sorted(out, key=lambda r: (r["table"], r["_seq"], r["_row"]))


def landed_rows(lake: Path) -> int:
    """Rows in the lake, from the footers (no compaction runs while this is called)."""
    return sum(pq.ParquetFile(f).metadata.num_rows for f in data_files(lake))


def write_compact_config(tmp_path: Path, lake: Path) -> Path:
    path = tmp_path / "compact.toml"
    path.write_text(f'[lake]\npath = "{lake}"\ncompact_grace = 0\n')
    return path


def compact_cmd(config: Path) -> list[str]:
    return [sys.executable, "-m", "replica.cli", "compact", "--config", str(config),
            "--min-age", "0"]


def compact_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BINLAKE_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def run_compact(config: Path) -> str:
    done = subprocess.run(compact_cmd(config), capture_output=True, text=True, timeout=300,
                          env=compact_env())
    assert done.returncode == 0, done.stderr
    return done.stdout


def assert_state_equals_select(spark: Any, server: ServerHandle, lake: Path, database: str,
                               tables: tuple[str, ...] = TABLES, **kwargs: Any) -> None:
    for table in tables:
        state = read_current_state(spark, str(lake), database, table, **kwargs)
        got = sorted((r["id"], r["v"], r["s"]) for r in state.collect())
        source = sorted((int(i), int(v), s) for i, v, s in
                        server.sql(f"SELECT id, v, s FROM {database}.{table}"))
        assert got == source, table


def test_compact_killed_then_rerun_with_the_daemon_stopped(mariadb_10_11: ServerHandle,
                                                          tmp_path: Path, lake: Path,
                                                          spark) -> None:
    server = mariadb_10_11
    database = unique_db("compact")
    start = binlog_end(server)
    writer = Writer(server, database, seed=16)
    writer.run(FILES)
    config = catch_up_config(server, lake, start, include=(database,))
    config = dataclasses.replace(config, lake=dataclasses.replace(config.lake, flush_rows=1))
    trio.run(catch_up, config)
    before = lake_rows(lake)
    files_before = len(data_files(lake))
    assert len(before) == writer.changes == FILES
    assert files_before >= FILES  # one file per transaction

    # kill -9 in the middle of its work: while it stages or commits a partition
    compact_config = write_compact_config(tmp_path, lake)
    process = subprocess.Popen(compact_cmd(compact_config), env=compact_env(),
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not (os.path.exists(lake / "_compact.json")
               or glob.glob(str(lake / "_compact_staging" / "g*" / "*" / "*" / "*" / "*" / "*"))):
        assert process.poll() is None, "compact ended before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.002)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert lake_rows(lake) == before  # nothing visible twice, nothing missing, before any rerun

    # the daemon's start cleans up what the killed compaction left (not the next compaction)
    files_killed = data_files(lake)
    trio.run(catch_up, config)
    assert not os.path.exists(lake / "_compact.json")
    assert not os.path.exists(lake / "_compact_staging")
    assert data_files(lake) == files_killed  # the rows just checked, untouched

    out = run_compact(compact_config)
    files_after = len(data_files(lake))
    assert files_after * 10 <= files_before, (files_before, files_after, out)
    assert files_after == len(TABLES)  # one day, one schema version: one file per table
    assert lake_rows(lake) == before  # every column of every row, _seq/_row/_before included
    assert not os.path.exists(lake / "_compact.json")
    assert read_changes(spark, str(lake), database, "t0").count() == sum(
        1 for r in before if r["table"] == "t0")
    assert_state_equals_select(spark, server, lake, database)

    # a materialised state, then more changes: state + replay == SELECT == full replay
    seq = materialize_state(spark, str(lake), database, "t0")
    assert seq == read_checkpoint(lake)["seq"]
    assert os.listdir(lake / database / "t0" / "_state") == [f"seq={seq}"]
    writer.run(60)
    trio.run(catch_up, config)
    assert_state_equals_select(spark, server, lake, database, tables=("t0",))
    assert_state_equals_select(spark, server, lake, database, tables=("t0",), use_state=False)


def stream(spark, lake: Path, database: str, tmp_path: Path, out: str,  # noqa: ANN201
           **options: str):
    """A query streaming t0 into Parquet at ``out``, its checkpoint beside it."""
    return (stream_changes(spark, str(lake), database, "t0", **options)
            .writeStream.format("parquet").option("path", str(tmp_path / out))
            .option("checkpointLocation", str(tmp_path / f"{out}_ck")).start())


def test_compact_beside_a_running_daemon(mariadb_10_11: ServerHandle, tmp_path: Path,
                                         lake: Path, spark) -> None:
    """t1 and t2 are written throughout (the daemon lands files into the very partitions being
    compacted, at --min-age 0); t0 is streamed by a query started before any compaction (and
    restarted from its checkpoint after the last), one started during them that reads a file
    per micro-batch and so lags behind every compaction, and one started after: each delivers
    every t0 row once."""
    server = mariadb_10_11
    database = unique_db("compact_live")
    count = max(90, FILES // 2 // 3 * 3)
    writer = Writer(server, database, seed=61)
    settings = daemon_settings(server, lake, database,
                               overrides={"lake": {"flush_interval": 0.05, "flush_rows": 1}})
    daemon = DaemonProcess(tmp_path, settings, password=server.users["repl"].password)
    daemon.start()
    stop = threading.Event()
    seen: dict[str, int] = {"reads": 0, "duplicates": 0, "switched": 0}

    def poll_reader() -> None:  # a plain directory reader: list, then open
        while not stop.is_set():
            files = data_files(lake)
            try:
                tables = [pq.read_table(f, columns=["_seq", "_row"]) for f in files]
            except FileNotFoundError:
                seen["switched"] += 1  # listed before a swap, opened after: read again
                continue
            if tables:
                keys = pa.concat_tables(tables)
                pairs = list(zip(keys.column("_seq").to_pylist(),
                                 keys.column("_row").to_pylist(), strict=True))
                seen["duplicates"] += len(pairs) - len(set(pairs))
                seen["reads"] += 1

    def wait_landed() -> None:
        deadline = time.monotonic() + 90
        while (landed := landed_rows(lake)) < writer.changes:
            daemon.check_alive()
            assert time.monotonic() < deadline, landed
            time.sleep(0.2)

    reader = threading.Thread(target=poll_reader, daemon=True)
    query = lagging = after = None
    try:
        daemon.wait_for(r"streaming from")
        writer.run(count)
        wait_landed()
        query = stream(spark, lake, database, tmp_path, "stream_out")
        query.processAllAvailable()
        reader.start()
        compact_config = write_compact_config(tmp_path, lake)
        for _ in range(3):  # compactions while the daemon lands files into t1's and t2's partitions
            batch = threading.Thread(target=writer.run, args=(count // 3, ("t1", "t2")))
            batch.start()
            time.sleep(0.3)
            run_compact(compact_config)
            batch.join()
            if lagging is None:
                lagging = stream(spark, lake, database, tmp_path, "lagging_out",
                                 maxFilesPerTrigger="1")
            writer.run(10, ("t0",))  # new t0 rows after a compaction: streamed as new files
            wait_landed()
            query.processAllAvailable()
        query.stop()
        run_compact(compact_config)
        query = stream(spark, lake, database, tmp_path, "stream_out")  # restarted
        after = stream(spark, lake, database, tmp_path, "after_out")
        for each in (query, lagging, after):
            each.processAllAvailable()
    finally:
        stop.set()
        for each in (query, lagging, after):
            if each is not None:
                each.stop()
        code, _ = daemon.terminate(timeout=STOP_TIMEOUT + 5)
    assert code == 0, daemon.run_stderr()
    reader.join(10)
    assert seen["duplicates"] == 0 and seen["reads"] >= 3, seen
    rows = lake_rows(lake)
    assert len(rows) == writer.changes == 2 * (count // 3 * 3) + 30
    assert len({(r["table"], r["_seq"], r["_row"]) for r in rows}) == len(rows)
    assert len(data_files(lake)) * 10 <= writer.changes
    t0 = sorted((r["_seq"], r["_row"]) for r in rows if r["table"] == "t0")
    for out in ("stream_out", "lagging_out", "after_out"):
        streamed = spark.read.parquet(str(tmp_path / out)).select("_seq", "_row").collect()
        assert sorted((r["_seq"], r["_row"]) for r in streamed) == t0, out  # each row once
    assert_state_equals_select(spark, server, lake, database)
    print(f"concurrent reader: {seen}")


def test_the_daemon_compacts_in_the_background(mariadb_10_11: ServerHandle,
                                               tmp_path: Path, lake: Path) -> None:
    """lake.compact_interval: the running daemon compacts its own lake, nothing lost."""
    server = mariadb_10_11
    database = unique_db("compact_bg")
    writer = Writer(server, database, seed=7)
    settings = daemon_settings(server, lake, database, overrides={"lake": {
        "flush_interval": 0.05, "flush_rows": 1, "compact_interval": 1.0,
        "compact_min_age": 0.5, "compact_grace": 0}})
    daemon = DaemonProcess(tmp_path, settings, password=server.users["repl"].password)
    daemon.start()
    try:
        daemon.wait_for(r"streaming from")
        writer.run(150)
        deadline = time.monotonic() + 60
        while True:
            daemon.check_alive()
            try:  # the daemon compacts meanwhile: a listed file may be swapped before it opens
                done = landed_rows(lake) == writer.changes and len(data_files(lake)) <= 15
            except FileNotFoundError:
                done = False
            if done:
                break
            assert time.monotonic() < deadline, len(data_files(lake))
            time.sleep(0.3)
        daemon.wait_for(r"compacted \d+ partitions")
    finally:
        code, _ = daemon.terminate(timeout=STOP_TIMEOUT + 5)
    assert code == 0, daemon.run_stderr()
    rows = lake_rows(lake)
    assert len(rows) == writer.changes == 150
    assert len({(r["table"], r["_seq"], r["_row"]) for r in rows}) == 150
