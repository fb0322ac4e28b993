"""A stream on disk follows the checkpoint's ``_seq``: this holds only if the sink never makes a
row visible at or below a ``_seq`` the checkpoint already passed (``docs/lake-format.md``,
"Streaming a lake on disk").

A stream (the disk backend of ``stream_changes``, without a Spark session) reads after every
flush of a sink driven as the daemon drives it (``flush_in_handle=False``: the caller runs the
lake work and the flushes), through every way rows take their ``_seq`` late or land apart from
their transaction — an XA transaction prepared long before its commit, a snapshot chunk staged
in pieces across flushes, one landed in memory, a transaction spilled past the memory budget,
a restart of the sink, compactions between batches — and must end with every landed row once.
A row made visible below the stream's position would be missing from what it read.
"""

from __future__ import annotations

from typing import Any

import pytest

from protocol.binlog.model import BinlogPosition
from sinks.chunks import SnapshotChunk
from sinks.contract import SnapshotProgress
from sinks.parquet import ParquetSink
from sinks.parquet import compact as K
from sinks.parquet.commit import OS
from sinks.parquet.options import SinkOptions
from sinks.parquet.status import read_checkpoint
from sinks.parquet.testing import StreamBuilder
from tests.unit.test_sink_parquet import users_columns
from tests.unit.test_snapshot_landing import _read

pytest.importorskip("pyspark")
from sinks.spark.localstream import LocalBackend  # noqa: E402
from tests.unit.test_localstream import landed, target  # noqa: E402

XID = "X'61',X'',1"
READ_US = 1_767_300_000_000_000
#: Small enough that the 3,000-row transaction below spills (its landing is deferred lake work).
BUDGET = 64 * 1024


class Stream:
    """A streaming query over shop.users: its position, and every (``_seq``, ``_row``) its
    micro-batches delivered."""

    def __init__(self, lake: str) -> None:
        self.lake = lake
        self.backend = LocalBackend(lake, "shop", "users", OS)
        self.position = 0
        self.delivered: list[tuple[int, int]] = []

    def batch(self) -> None:
        end = self.backend.latest(self.position, 0)
        if end <= self.position:
            return
        for partition in self.backend.partitions(self.position, end):
            for batch in self.backend.read(partition, target(self.lake)):
                self.delivered += zip(batch.column("_seq").to_pylist(),
                                      batch.column("_row").to_pylist(), strict=True)
        self.position = end


def test_rows_become_visible_in_seq_order_whatever_way_they_land(tmp_path):
    lake = str(tmp_path / "lake")
    options = SinkOptions(flush_in_handle=False, memory_limit_bytes=BUDGET)
    b = StreamBuilder()
    users = b.table("shop", "users", users_columns())
    stream = Stream(lake)
    sink = ParquetSink(lake, options)
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
    K.compact_lake(lake, K.CompactOptions(min_age=0, grace=0))
    stream.batch()
    # a restart: the numbering goes on from the checkpoint
    sink.close()
    sink = ParquetSink(lake, options)
    sink.open()
    txn()
    flush()
    K.compact_lake(lake, K.CompactOptions(min_age=0, grace=0))
    txn(2)
    flush()
    sink.close()
    stream.batch()

    lake_rows = landed(lake)
    assert stream.position == read_checkpoint(lake)["seq"]
    assert len(lake_rows) == len(set(lake_rows)) == 3014
    assert sorted(stream.delivered) == lake_rows
