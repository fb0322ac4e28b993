"""The sink's memory budget counts rows decoded into Arrow chunks at their buffers' real size
(buffer.estimate), so a text or binary column counts what it holds, not a fixed size per value whatever the
value — and a transaction of big values spills as soon as the budget
says, not thousands of rows later."""

from __future__ import annotations

import dataclasses
import os
from unittest import mock

import pytest

from protocol.binlog import native
from protocol.binlog.coltypes import FieldType as T
from protocol.binlog.model import RowsEvent, RowsKind, TableMapEvent
from protocol.binlog.rows import DecoderCache, decode_rows_event
from sinks.parquet import ParquetSink, SinkOptions, native_batch
from sinks.parquet.buffer import METADATA_ROW_BYTES, VALUE_BYTES
from sinks.parquet.buffer import estimate as _estimate
from sinks.parquet.rows import PendingRows, TransactionTags, rows_batch
from sinks.parquet.schema import TableVersion, VersionOrigin
from sinks.parquet.testing import StreamBuilder
from sinks.parquet.types import new_counter
from tests.unit.rowbuild import Col, header, image, rows_body, u16
from tests.unit.test_native_rows import _table

pytestmark = pytest.mark.skipif(not native.ARROW, reason="the native Arrow decoder is not built")

COLUMNS = [Col(T.LONG, nullable=False, name="id"), Col(T.VARCHAR, u16(4000), charset=45,
                                                        name="note"),
           Col(T.BLOB, bytes([2]), charset=63, name="payload")]
TABLE = _table(COLUMNS)
TAGS = TransactionTags(1, "0-1-7", 0, 1, None, None, 7, "bin.000001", 4)


def _row(ident: int, note: bytes | None, payload: bytes | None) -> bytes:
    return image([ident.to_bytes(4, "little"),
                  None if note is None else len(note).to_bytes(2, "little") + note,
                  None if payload is None else len(payload).to_bytes(2, "little") + payload])


def _event(rows: list[bytes], table: TableMapEvent = TABLE, *, arrow: bool = True) -> RowsEvent:
    with mock.patch.object(native, "ARROW", arrow):
        event = decode_rows_event(header(30), memoryview(rows_body(3, rows)), 8,
                                  {table.table_id: table}, version=1, kind=RowsKind.INSERT,
                                  decoders=DecoderCache(arrow=arrow))
    assert (event.arrow is not None) is arrow
    return event


def _version() -> TableVersion:
    return TableVersion.from_table_map(TABLE, 1, VersionOrigin(1), new_counter())


def test_an_arrow_event_counts_its_buffers_exactly() -> None:
    event = _event([_row(1, b"a" * 100, b"\x00" * 3000), _row(2, b"b" * 1000, None),
                    _row(3, None, b"\x01" * 2)])
    meta = METADATA_ROW_BYTES + len("0-1-7") + len("bin.000001")
    # id: 3 int32 values, no NULLs (no validity); note: 1,100 bytes, 4 offsets, a validity
    # byte; payload: 3,002 bytes, 4 offsets, a validity byte
    assert _estimate(_version(), event, TAGS) == 3 * meta + 12 + (1100 + 16 + 1) + (3002 + 16 + 1)
    # ... the very buffers the landed batch's data columns hold
    batch = rows_batch(_version(), [PendingRows(event, TAGS, 0, (), 1)], with_commit_time=True)
    data = sum(buffer.size for name in ("id", "note", "payload")
               for buffer in batch.column(name).buffers() if buffer is not None)
    assert data == 12 + (1100 + 16 + 1) + (3002 + 16 + 1)


def test_the_sum_in_c_and_the_python_loop_agree_and_bad_shapes_raise() -> None:
    """``native_batch.arrow_bytes`` (C) is the estimate's buffer sum; without it (an extension built
    before it) the sink sums in Python: the same figure. A malformed image raises TypeError."""
    assert native_batch.arrow_bytes is not None
    event = _event([_row(1, b"a" * 100, b"\x00" * 3000), _row(2, None, None)])
    in_c = _estimate(_version(), event, TAGS)
    with mock.patch.object(native_batch, "arrow_bytes", None):
        assert _estimate(_version(), event, TAGS) == in_c
    meta = METADATA_ROW_BYTES + len("0-1-7") + len("bin.000001")
    assert in_c == 2 * meta + 8 + (100 + 12 + 1) + (3000 + 12 + 1)
    chunk = ("i", 0, b"\x01", b"abcd", b"12345678")
    assert native_batch.arrow_bytes((None, (chunk, None, ("s", 1, None, b"xy", None)))) == 15
    for bad in ([None, None], (None, [chunk]), (None, (chunk[:4],)), (None, (1,)),
                (None, (("i", 0, None, None, None),)), (None, (("i", 0, 5, b"", None),))):
        with pytest.raises(TypeError):
            native_batch.arrow_bytes(bad)


def test_a_column_without_a_chunk_counts_per_value() -> None:
    """A column rule drops a ruled column's chunk (its values land from Python): that column
    counts VALUE_BYTES a value, the others their buffers."""
    event = _event([_row(1, b"a" * 100, b"\x00" * 3000), _row(2, None, None)])
    assert event.arrow is not None
    after = event.arrow[1]
    ruled = dataclasses.replace(event, arrow=(None, (after[0], after[1], None)))
    meta = METADATA_ROW_BYTES + len("0-1-7") + len("bin.000001")
    assert _estimate(_version(), ruled, TAGS) == 2 * meta + 8 + (100 + 12 + 1) + 2 * VALUE_BYTES


def test_an_event_without_chunks_counts_per_value() -> None:
    event = _event([_row(1, b"a" * 100, None), _row(2, b"b", b"c")], arrow=False)
    assert _estimate(_version(), event, TAGS) == 2 * (3 + 14) * VALUE_BYTES


def test_big_values_spill_when_the_budget_says(tmp_path: str) -> None:
    """Ten events of ten 30 kB rows (3 MB) in one transaction under a 1 MiB budget: every
    fourth event takes the open transaction over it and it spills. Counted at 12 bytes a
    value (the old estimate: ~2 kB an event) nothing spilled before 4,096 rows."""
    lake = os.path.join(tmp_path, "lake")
    sink = ParquetSink(lake, SinkOptions(memory_limit_bytes=1024 * 1024))
    sink.open()
    b = StreamBuilder()
    sink.handle(b.begin())
    spilled = []
    for n in range(10):
        rows = [_row(n * 10 + i, b"x" * 10_000, b"y" * 20_000) for i in range(10)]
        sink.handle(_event(rows))
        spilled.append(sink.stats.spilled_batches)
    # each event 301,428 bytes (10 × 30,000 + 10 × 142 of metadata): over 1 MiB at the 4th
    assert spilled == [0, 0, 0, 1, 1, 1, 1, 2, 2, 2]
    sink.handle(b.commit())
    sink.close()
    assert sink.stats.rows == 100
