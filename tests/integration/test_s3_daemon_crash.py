"""``binlake run`` into a lake on the test bed's Ceph gateway, killed with SIGKILL while a
workload flows, on MariaDB 10.11 and MySQL 9.7: restarted each time, the lake read through its
commit log holds every change exactly once and replays to ``SELECT`` cell for cell, and after
the last, clean run its data objects are exactly those the log keeps (the interrupted commits'
orphans were swept by the next start). The daemon writes a log snapshot every few records, so
kills land around snapshots too, every start reads through them, and the lake as of the newest
snapshot and the records after it is the lake every record gives.

The workload: inserts, key-changing updates, deletes and rollbacks on four tables (``workload.
py``), two ALTERs mid-stream (a column added, a column's type changed) between kills, a
12-MiB transaction of incompressible rows (and a one-row mark: ``_Big``) before every kill but a
start-up one, and, in a run of its own, one 2,000,000-row transaction. The kills rotate over
three moments:

* at a random moment (start-up included);
* **during a multipart upload**: the store lists an upload in progress (``ListMultipartUploads``)
  while a large file streams; confirmed after the kill by the upload still being listed — and
  the next start aborts it;
* **between the data and the commit record**: a data object is listed that no record of the
  log names; confirmed after the kill by the object still being named by none — and the next
  start removes it.

Each kill but a start-up one is aimed at a blob transaction, after the one the last kill
interrupted has landed (so the lake moves on between kills), and the wait for its moment lasts
until that blob is committed, however far behind the restart left the daemon: never a fixed
time. A kill that missed its moment (the commit was quicker than the poll) counts as one at a
random moment, and the moment is aimed at again after the restart. A clean run then lands the
rest of the workload, and a last clean run of its own lands the 2M-row transaction: that
daemon's peak RSS (its ``VmHWM``) stays within the disk sink's bound (``RSS_LIMIT_MB`` of
``tests/unit/test_sink_memory.py``) plus what the S3 clients cost a process (boto3 and pyarrow's
S3 file system, measured in a fresh interpreter: about 37 MB, which a lake on disk never
loads), and the large tables equal ``SELECT`` by count and a
per-row checksum (``CRC32`` of every cell, combined).

``BINLAKE_S3_CRASH_ITERATIONS`` sets the number of moments hit (default 6, two of each kind,
sized for CI; 30 or more for a thorough run); the kills, misses included, are printed.
``BINLAKE_S3_BIG_ROWS`` sets the large transaction's rows (default 2,000,000).
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
import time
import zlib
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from bench.measure import vm_hwm_kib
from sinks.objectstore.commit import CommitLog, live_objects
from sinks.objectstore.logstate import read_state, snapshot_numbers
from sinks.objectstore.view import layout_name
from tests.servers.ceph import CephGateway
from tests.servers.handle import ServerHandle
from tests.unit.test_sink_memory import RSS_LIMIT_MB

from .daemon_process import DaemonProcess, unique_db
from .s3_lake import (
    LogFollower,
    committed_copy,
    committed_data_keys,
    data_keys,
    gateway_store,
    s3_daemon,
    wait_for_s3_lake,
)
from .test_daemon_crash import _Background
from .workload import Workload, compare_lake

pytestmark = pytest.mark.s3

ITERATIONS = int(os.environ.get("BINLAKE_S3_CRASH_ITERATIONS", "6"))
BIG_ROWS = int(os.environ.get("BINLAKE_S3_BIG_ROWS", "2000000"))
#: Rows of 1 KiB of random bytes per blob transaction: a 12 MiB file, past the 8 MiB above which
#: a file is streamed as a multipart upload.
BLOB_ROWS = 12_000
MOMENTS = ("random", "multipart", "uncommitted")
#: Kills aimed at one moment before the test gives up on it (one that missed still counts).
ATTEMPTS = 10

#: The ALTERs run mid-stream, between kills: a column added, then a column's type changed.
ALTERS = ("ALTER TABLE numbers ADD COLUMN extra INT NULL",
          "ALTER TABLE numbers MODIFY c_int BIGINT")

#: Per large table: its columns, and the SELECT expression of each cell for the checksum.
BIG_TABLES = {"facts": ("id", "label", "qty"), "blobs": ("id", "HEX(payload)")}


def _rows(server: ServerHandle, count: int, first: int) -> str:
    """A derived table of ``n`` = first .. first + count - 1, on either flavor."""
    return (f"(WITH RECURSIVE seq (n) AS (SELECT {first} UNION ALL SELECT n + 1 FROM seq "
            f"WHERE n < {first + count - 1}) SELECT n FROM seq) AS s")


def _session(server: ServerHandle) -> str:
    """Lets a recursive CTE make millions of rows (both flavors stop one at 1000 by default)."""
    variable = "max_recursive_iterations" if server.is_mariadb else "cte_max_recursion_depth"
    return f"SET SESSION {variable} = 100000000; "


class _Statement(threading.Thread):
    """One statement on a thread of its own; :meth:`finish` joins it and raises its error."""

    def __init__(self, server: ServerHandle, statement: str) -> None:
        super().__init__(name="big-transaction", daemon=True)
        self.server, self.statement = server, statement
        self.error: BaseException | None = None
        self.start()

    def run(self) -> None:
        try:
            self.server.sql(self.statement)
        except BaseException as exc:  # raised by finish()
            self.error = exc

    def finish(self, timeout: float = 120.0) -> None:
        self.join(timeout)
        assert not self.is_alive(), f"still running after {timeout} s: {self.statement}"
        if self.error is not None:
            raise self.error


class _Big:
    """The large transactions, in a database of their own (their rows are checked by checksum,
    not one by one): ``facts`` gets the 2M-row transaction, ``blobs`` one of 12 MiB per kill.

    Each blob transaction also inserts a row into ``a_marks``, whose name sorts before
    ``blobs``: a flush uploads its files in name order, so while the blob file streams, the
    small ``a_marks`` file of the same commit is a data object no record names yet. That window
    lasts as long as the upload, whatever else the flush holds, so a kill aimed between the data
    and the commit record finds it without depending on the workload's pace."""

    def __init__(self, server: ServerHandle) -> None:
        self.server = server
        self.database = unique_db("s3zbig")
        self.blobs = 0
        self._rows: dict[str, int] = {}  # committed file of this database -> its rows
        server.sql(f"CREATE DATABASE {self.database}; USE {self.database}; "
                   "CREATE TABLE facts (id BIGINT PRIMARY KEY, label VARCHAR(40), qty INT); "
                   "CREATE TABLE blobs (id BIGINT PRIMARY KEY, payload VARBINARY(1024)); "
                   "CREATE TABLE a_marks (id BIGINT PRIMARY KEY)")

    def blob_transaction(self) -> _Statement:
        """Insert ``BLOB_ROWS`` rows of random bytes, and their mark, in one transaction, on a
        thread."""
        first = self.blobs * BLOB_ROWS + 1
        self.blobs += 1
        return _Statement(self.server, f"{_session(self.server)}START TRANSACTION; "
                          f"INSERT INTO {self.database}.a_marks VALUES ({self.blobs}); "
                          f"INSERT INTO {self.database}.blobs SELECT n, RANDOM_BYTES(1024) FROM "
                          f"{_rows(self.server, BLOB_ROWS, first)}; COMMIT")

    def blob_landed(self, follower: LogFollower) -> bool:
        """Whether the newest blob transaction is in the committed lake: its mark row is."""
        return self.committed_rows(follower)["a_marks"] >= self.blobs

    def facts_transaction(self) -> None:
        self.server.sql(f"{_session(self.server)}INSERT INTO {self.database}.facts "
                        f"SELECT n, CONCAT('label-', n), n % 1000 FROM "
                        f"{_rows(self.server, BIG_ROWS, 1)}")

    @property
    def expected(self) -> dict[str, int]:
        return {"facts": BIG_ROWS, "blobs": self.blobs * BLOB_ROWS, "a_marks": self.blobs}

    def committed_rows(self, follower: LogFollower) -> Counter[str]:
        """Rows per table of this database in the committed lake (each file's from its footer,
        read once)."""
        rows: Counter[str] = Counter()
        for key in live_objects(follower.records()):
            name = layout_name(key)
            if name.startswith(f"{self.database}/") and name.endswith(".parquet"):
                if key not in self._rows:
                    parquet = pq.ParquetFile(follower.store.open_input(key))
                    self._rows[key] = parquet.metadata.num_rows
                rows[name.split("/")[1]] += self._rows[key]
        return rows

    def assert_equals_select(self, lake: Path) -> None:
        """Each large table: every change once (``I`` rows, keys unique) and the same rows as
        ``SELECT``, by count and an order-free sum of per-row checksums over every cell."""
        for table, cells in BIG_TABLES.items():
            files = sorted((lake / self.database / table).rglob("*.parquet"))
            columns = [c for c in cells if "(" not in c] + (["payload"] if table == "blobs"
                                                            else [])
            count, crc_sum, crc_xor, ids = 0, 0, 0, set()
            for batch in (b for path in files
                          for b in pq.ParquetFile(path).iter_batches(columns=["_op", *columns])):
                data = batch.to_pydict()
                assert set(data["_op"]) <= {"I"}
                for values in zip(*(data[c] for c in columns), strict=True):
                    text = "|".join(v.hex().upper() if isinstance(v, bytes) else str(v)
                                    for v in values)
                    crc = zlib.crc32(text.encode())
                    count, crc_sum, crc_xor = count + 1, crc_sum + crc, crc_xor ^ crc
                    ids.add(values[0])
            assert count == len(ids), f"{table}: a row landed twice"
            (row,) = self.server.sql(
                f"SELECT COUNT(*), COALESCE(SUM(CRC32(CONCAT_WS('|', {', '.join(cells)}))), 0), "
                f"COALESCE(BIT_XOR(CRC32(CONCAT_WS('|', {', '.join(cells)}))), 0) "
                f"FROM {self.database}.{table}")
            assert (count, crc_sum, crc_xor) == tuple(int(v or 0) for v in row), table


def _s3_clients_mb() -> float:
    """The RSS that importing and making the S3 clients adds to a process that has pyarrow's
    Parquet already (a fresh interpreter: the daemon on S3 loads them, the disk sink the bound
    is measured on does not)."""
    script = """
import pyarrow.parquet
def rss():
    return next(int(line.split()[1]) for line in open("/proc/self/status")
                if line.startswith("VmRSS"))
before = rss()
import boto3, pyarrow.fs
boto3.session.Session().client("s3", endpoint_url="http://127.0.0.1:9", region_name="x",
                               aws_access_key_id="x", aws_secret_access_key="x")
pyarrow.fs.S3FileSystem(region="x", endpoint_override="127.0.0.1:9", scheme="http",
                        access_key="x", secret_key="x")
print(rss() - before)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          check=True, timeout=120)
    return int(done.stdout) / 1024


def _uploads(client: Any, bucket: str) -> set[str]:
    """The ids of the multipart uploads in progress (or left unfinished) under the lake."""
    listing = client.list_multipart_uploads(Bucket=bucket, Prefix="lake/")
    return {upload["UploadId"] for upload in listing.get("Uploads", [])}


def _kill_at(moment: str, daemon: DaemonProcess, follower: LogFollower, client: Any,
             bucket: str, prefixes: tuple[str, ...], missed: Callable[[], bool],
             timeout: float = 600.0) -> bool:
    """Wait for ``moment`` and kill the daemon there; whether the kill is confirmed to have
    landed in it (the store, frozen by the kill, still shows it). The wait ends, as a miss, once
    ``missed()`` says the commit aimed at is in the lake: however far behind a restart left the
    daemon, it is given until then, never a fixed time (``timeout`` only stops a hang)."""
    deadline = time.monotonic() + timeout
    before = _uploads(client, bucket)
    while True:
        if moment == "multipart":
            seen = _uploads(client, bucket) - before
        else:
            seen = follower.uncommitted_data_keys(prefixes)
        if seen or missed():
            break
        daemon.check_alive()
        assert time.monotonic() < deadline, f"no {moment} moment within {timeout} s"
    daemon.kill()
    if moment == "multipart":
        return bool(seen) and seen <= _uploads(client, bucket)
    return bool(seen) and bool(seen & follower.uncommitted_data_keys(prefixes))


@pytest.mark.slow
@pytest.mark.parametrize("flavor", ["mariadb_10_11", "mysql_9_7"])
def test_sigkill_into_s3_loses_and_duplicates_nothing(
        flavor: str, request: pytest.FixtureRequest, ceph_gateway: CephGateway,
        s3_bucket: str, tmp_path: Path) -> None:
    server: ServerHandle = request.getfixturevalue(flavor)
    database = unique_db("s3crash")
    lake = f"s3://{s3_bucket}/lake"
    big = _Big(server)
    daemon = s3_daemon(server, ceph_gateway, tmp_path, lake, [database, big.database],
                       overrides={"lake": {"flush_interval": 0.3, "flush_rows": 500},
                                  "lake.s3": {"log_snapshot_records": 5}})
    store = gateway_store(ceph_gateway, lake)
    follower = LogFollower(store)
    prefixes = (f"{big.database}/",)  # where the aimed-at data objects land (``_Big``)
    client = ceph_gateway.client()
    workload = Workload(server, database, seed=2828)
    workload.create_tables()
    rng = random.Random(ITERATIONS)
    records: list[int] = []
    confirmed: Counter[str] = Counter()
    left: set[str] = set()  # objects an interrupted commit left: the next start removes them
    unfinished: set[str] = set()  # uploads a killed daemon left: the next start aborts them
    try:
        # At a fixed, modest rate: unthrottled, the workload can outrun a daemon that restarts
        # every few seconds, and the run's length would grow with the machine's speed instead
        # of with the number of kills.
        with _Background(workload, pause=0.25):
            for iteration in range(ITERATIONS):
                moment = MOMENTS[iteration % len(MOMENTS)]
                for index, alter in enumerate(ALTERS):  # spread over the first kills
                    if iteration == min(index * 2 + 1, ITERATIONS - 1):
                        workload.sql(alter)
                for _attempt in range(ATTEMPTS):  # a kill that missed its moment: aim again
                    daemon.start()
                    if moment == "random" and rng.random() < 0.25:
                        time.sleep(rng.uniform(0.2, 1.5))  # start-up: probe, lease, sweep
                        daemon.kill()
                        confirmed[moment] += 1
                        break
                    daemon.wait_for(r"streaming from", timeout=120)
                    assert not left & data_keys(store), "an interrupted commit's objects stayed"
                    assert not unfinished & _uploads(client, s3_bucket), "an upload stayed"
                    left, unfinished = set(), set()
                    # The blob transaction a kill interrupted lands first, so that every kill
                    # is aimed at a commit that comes after progress.
                    deadline = time.monotonic() + 300
                    while not big.blob_landed(follower):
                        daemon.check_alive()
                        assert time.monotonic() < deadline, "the last blob transaction never landed"
                        time.sleep(0.1)
                    records.append(sum(1 for r in follower.records() if r.data_change))
                    inserting = big.blob_transaction()
                    hit = True
                    if moment == "random":
                        time.sleep(rng.uniform(0.0, 1.0))
                        daemon.check_alive()
                        daemon.kill()
                    else:
                        hit = _kill_at(moment, daemon, follower, client, s3_bucket, prefixes,
                                       missed=lambda: big.blob_landed(follower))
                        if hit and moment == "uncommitted":
                            left = follower.uncommitted_data_keys(prefixes)
                        if hit and moment == "multipart":
                            unfinished = _uploads(client, s3_bucket)
                    inserting.finish()
                    if hit:
                        confirmed[moment] += 1
                        break
        # Transactions were committed between the kills (every blob but the first was
        # committed before the next was aimed at), never taken back.
        assert records[-1] > 0 and records == sorted(set(records)), records
        # Every moment aimed at was hit (the store, frozen by the kill, showed it).
        assert sum(confirmed.values()) == ITERATIONS, confirmed
        kills = daemon.runs
        print(f"kills: {kills}, in their moment: {dict(confirmed)}")

        daemon.start()  # the workload's last transactions, and the sweep of the last kill's
        daemon.wait_for(r"streaming from", timeout=60)
        assert not left & data_keys(store), "an interrupted commit's objects stayed"
        assert not unfinished & _uploads(client, s3_bucket), "an upload stayed"
        copy = wait_for_s3_lake(store, workload, daemon, tmp_path, timeout=300)
        code, _took = daemon.terminate(timeout=30)
        assert code == 0, daemon.run_stderr()

        daemon.start()  # a run of its own for the 2M-row transaction, for its peak RSS
        daemon.wait_for(r"streaming from", timeout=60)
        started = time.monotonic()
        big.facts_transaction()
        inserted_s = time.monotonic() - started
        deadline = time.monotonic() + 300
        while (rows := big.committed_rows(follower)) != big.expected:
            daemon.check_alive()
            assert time.monotonic() < deadline, f"{rows} != {big.expected}"
            time.sleep(1.0)
        landed_s = time.monotonic() - started
        peak_mb = vm_hwm_kib(daemon.process.pid) / 1024  # type: ignore[union-attr]
        code, _took = daemon.terminate(timeout=30)
        assert code == 0, daemon.run_stderr()
    finally:
        daemon.kill()
    print(f"{BIG_ROWS} rows in one transaction: the server took {inserted_s:.1f} s, the lake had "
          f"them {landed_s:.1f} s after it began; peak RSS of the daemon {peak_mb:.0f} MB")
    clients_mb = _s3_clients_mb()
    assert 0 < peak_mb < RSS_LIMIT_MB + clients_mb, (
        f"peak RSS {peak_mb:.0f} MB, bound {RSS_LIMIT_MB} + {clients_mb:.0f} MB")
    assert daemon.runs == kills + 2
    compare_lake(server, copy, workload)
    # the ALTERs landed: the added column and the changed type are in the lake's newest files
    versions = sorted((copy / database / "numbers").glob("schema_version=*"),
                      key=lambda path: int(path.name.partition("=")[2]))
    newest = pq.read_schema(next(versions[-1].rglob("*.parquet")))
    assert "extra" in newest.names and str(newest.field("c_int").type) == "int64", newest
    big.assert_equals_select(committed_copy(store, tmp_path / "big", big.database))
    # After a clean stop the data objects are exactly the committed ones: no orphan is left.
    assert data_keys(store) == committed_data_keys(store)
    # The log's snapshots were written and give what every record gives.
    assert snapshot_numbers(store)
    assert read_state(store).live == live_objects(CommitLog(store).records())
