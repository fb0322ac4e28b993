"""A stream follows the commit order (a lake on disk: the checkpoint's ``_seq``; on object
storage: the log's record numbers, each standing for its checkpoint's ``seq``): this holds only
if the sink never makes a row visible at or below a ``_seq`` the checkpoint already passed
(``docs/lake-format.md``, "Streaming a lake on disk").

A stream (the backend of ``stream_changes``, without a Spark session) reads after every flush
of a sink driven as the daemon drives it (``flush_in_handle=False``: the caller runs the lake
work and the flushes), through every way rows take their ``_seq`` late or land apart from
their transaction — an XA transaction prepared long before its commit, a snapshot chunk staged
in pieces across flushes, one landed in memory, a transaction spilled past the memory budget,
a restart of the sink, compactions between batches (on object storage also one deleting what
an earlier one replaced) — and must end with every landed row once. A row made visible below
the stream's position would be missing from what it read. Both lakes run the same stream.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from protocol.binlog.model import BinlogPosition
from sinks.chunks import SnapshotChunk
from sinks.contract import SnapshotProgress
from sinks.objectstore import compact as C
from sinks.objectstore.commit import CommitLog
from sinks.objectstore.logstate import read_state
from sinks.objectstore.memory import MemoryStore
from sinks.objectstore.view import is_data_name
from sinks.parquet import ParquetSink
from sinks.parquet import compact as K
from sinks.parquet.commit import OS
from sinks.parquet.compact import CompactOptions
from sinks.parquet.options import SinkOptions
from sinks.parquet.status import read_checkpoint
from sinks.parquet.testing import StreamBuilder
from tests.objectlake import URL
from tests.unit.test_objectstore_sink import object_sink
from tests.unit.test_sink_parquet import users_columns
from tests.unit.test_snapshot_landing import _read

pytest.importorskip("pyspark")
from sinks.spark.localstream import LocalBackend  # noqa: E402
from sinks.spark.objectstream import ObjectBackend  # noqa: E402
from tests.unit.test_localstream import landed, read  # noqa: E402

XID = "X'61',X'',1"
READ_US = 1_767_300_000_000_000
#: Small enough that the 3,000-row transaction below spills (its landing is deferred lake work).
BUDGET = 64 * 1024


class DiskLake:
    """A lake on disk, its stream backend and its compaction."""

    def __init__(self, tmp_path: Any) -> None:
        self.path = str(tmp_path / "lake")
        self.backend: Any = LocalBackend(self.path, "shop", "users", OS)

    def sink(self, options: SinkOptions, restart: int) -> ParquetSink:
        return ParquetSink(self.path, options)

    def compact(self) -> None:
        K.compact_lake(self.path, K.CompactOptions(min_age=0, grace=0))

    def landed(self) -> list[tuple[int, int]]:
        return landed(self.path)

    def newest(self) -> int:
        """The stream's newest position: the checkpoint's seq."""
        return int(read_checkpoint(self.path)["seq"])


class StoreLake(DiskLake):
    """A lake on (in-memory) object storage: the sink writes in a spool and commits through
    the log; each compaction also deletes what the one before it replaced."""

    def __init__(self, tmp_path: Any) -> None:
        self.store = MemoryStore()
        self.path = str(tmp_path / "spool")  # the schema files are there too
        self.backend = ObjectBackend(lambda: self.store, "shop/users/")
        self.now = 1000.0

    def sink(self, options: SinkOptions, restart: int) -> ParquetSink:
        return object_sink(self.store, self.path, pid=1 + restart, options=options)

    def compact(self) -> None:
        C.compact_store(self.store, URL, CompactOptions(min_age=0, grace=10), now=self.now)
        self.now += 100.0

    def landed(self) -> list[tuple[int, int]]:
        names = read_state(self.store).names
        tables = [pq.read_table(self.store.open_input(key), columns=["_seq", "_row"])
                  for name, key in sorted(names.items())
                  if name.startswith("shop/users/") and is_data_name(name)]
        table = pa.concat_tables(tables)
        return sorted(zip(table.column("_seq").to_pylist(), table.column("_row").to_pylist(),
                          strict=True))

    def newest(self) -> int:
        """The stream's newest position: the newest record's number."""
        return CommitLog(self.store).newest_number()


class Stream:
    """A streaming query over shop.users: its position, and every (``_seq``, ``_row``) its
    micro-batches delivered."""

    def __init__(self, lake: DiskLake) -> None:
        self.lake = lake
        self.position = 0
        self.delivered: list[tuple[int, int]] = []

    def batch(self) -> None:
        backend = self.lake.backend
        end = backend.latest(self.position, 0)
        if end <= self.position:
            return
        self.delivered += read(backend, self.lake.path, self.position, end)
        self.position = end


@pytest.mark.parametrize("kind", [DiskLake, StoreLake], ids=["disk", "store"])
def test_rows_become_visible_in_commit_order_whatever_way_they_land(tmp_path, kind):
    lake = kind(tmp_path)
    options = SinkOptions(flush_in_handle=False, memory_limit_bytes=BUDGET)
    b = StreamBuilder()
    users = b.table("shop", "users", users_columns())
    stream = Stream(lake)
    sink = lake.sink(options, 0)
    sink.open()
    key = iter(range(1, 1_000_000))

    def feed(items: list[Any]) -> None:
        for item in items:
            sink.handle(item)
            if sink.io_wanted:
                sink.run_io()

    def txn(rows: int = 1) -> None:
        feed([b.begin(), b.insert(users, [(next(key), "u", 1) for _ in range(rows)]),
              b.commit()])

    def flush() -> None:
        sink.run_io()
        sink.flush()
        stream.batch()

    def progress() -> SnapshotProgress:
        return SnapshotProgress()

    txn()
    flush()
    # an XA transaction prepared now (its PREPARE takes a _seq) and committed much later
    feed([b.begin(), b.insert(users, [(next(key), "xa", 1)]), b.prepare(XID)])
    txn()
    flush()
    # a chunk staged in pieces while transactions land and flush around it
    staged = sink.stage_piece(None, _read(users, [(next(key), "r", 1)]))
    txn()
    flush()
    staged = sink.stage_piece(staged, _read(users, [(next(key), "r", 2),
                                                           (next(key), "r", 3)]))
    txn()
    flush()
    sink.land_chunk(SnapshotChunk(progress(), BinlogPosition("binlog.000001", b.pos), READ_US,
                                  staged=staged))
    stream.batch()
    txn()
    feed(b.xa_outcome(XID, commit=True))  # the prepared rows land now, at this _seq
    flush()
    # a chunk in memory, then a transaction spilled past the budget (landed as deferred work)
    sink.land_chunk(SnapshotChunk(progress(), BinlogPosition("binlog.000001", b.pos), READ_US,
                                  _read(users, [(next(key), "m", 1)])))
    txn(3000)
    txn()
    flush()
    assert sink.stats.spilled_batches > 0
    lake.compact()
    stream.batch()
    # a restart: the numbering goes on from the checkpoint
    sink.close()
    sink = lake.sink(options, 1)
    sink.open()
    txn()
    flush()
    lake.compact()
    txn(2)
    flush()
    sink.close()
    stream.batch()

    lake_rows = lake.landed()
    assert stream.position == lake.newest()
    assert len(lake_rows) == len(set(lake_rows)) == 3014
    assert sorted(stream.delivered) == lake_rows
