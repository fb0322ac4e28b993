"""The native decoder's Arrow chunks against the Python values (server-free): the same rows events
decoded for Arrow (``DecoderCache(arrow=True)``, what the daemon's stream does) and into Python
lists, then landed by the sink's conversion (``rows_batch``) — identical record batches (types,
values, NULLs, zero dates counted alike), identical typed errors on truncated and bit-flipped
events, never a crash. Covers random rows of every type the native decoder handles (the 53
column variants of test_native_rows), MINIMAL images, UPDATEs with key changes, and columns
whose values must fall back to Python (zero dates, strings that are not UTF-8, DECIMAL over 38
digits, a VARCHAR landed as binary). ``bench/native_asan.sh`` runs it under ASan+UBSan.
"""

from __future__ import annotations

import dataclasses
import math
import os
import random
import subprocess
import sys
import time
from typing import Any
from unittest import mock

import pyarrow as pa
import pytest

from protocol.binlog import native
from protocol.binlog.coltypes import FieldType as T
from protocol.binlog.model import RowsEvent, RowsKind, TableMapEvent
from protocol.binlog.rows import DecoderCache, LazyImage, decode_rows_event
from protocol.errors import EventDecodeError
from sinks.parquet import native_batch
from sinks.parquet.rows import PendingRows, TransactionTags, rows_batch
from sinks.parquet.schema import TableVersion, VersionOrigin
from sinks.parquet.types import new_counter
from tests.unit.rowbuild import Col, header, image, rows_body, u16
from tests.unit.test_native_rows import (
    COLUMNS,
    ROUNDS,
    _dt2,
    _int,
    _prefixed,
    _table,
    corrupted_events,
)

NAMED = [(dataclasses.replace(c, name=f"c{i}"), enc) for i, (c, enc) in enumerate(COLUMNS)]
TABLE = _table([c for c, _ in NAMED])
TAGS = TransactionTags(7, None, None, None, None, None, None, "bin.000001", 4)


def _decode(body: bytes, kind: RowsKind, arrow: bool,
            table: TableMapEvent = TABLE) -> RowsEvent | type[BaseException]:
    with mock.patch.object(native, "ENABLED", True), mock.patch.object(native, "ARROW", True):
        try:
            return decode_rows_event(header(), memoryview(body), 8, {table.table_id: table},
                                     version=1, kind=kind, decoders=DecoderCache(arrow=arrow))
        except EventDecodeError as exc:
            return type(exc)


def _norm(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    if isinstance(value, dict):
        return {k: _norm(v) for k, v in value.items()}
    return value


def _land(event: RowsEvent, table: TableMapEvent, moved: tuple[int, ...] = ()
          ) -> tuple[pa.RecordBatch, int]:
    counter = new_counter()
    version = TableVersion.from_table_map(table, 1, VersionOrigin(1), counter)
    batch = rows_batch(version, [PendingRows(event, TAGS, 0, moved, 1_700_000_000_000_000)],
                       with_commit_time=True)
    return batch, counter.invalid_temporal


def _same(body: bytes, kind: RowsKind, table: TableMapEvent = TABLE,
          moved: tuple[int, ...] = ()) -> RowsEvent | type[BaseException]:
    reference = _decode(body, kind, False, table)
    arrow = _decode(body, kind, True, table)
    if not isinstance(reference, RowsEvent):
        assert arrow is reference, f"arrow decoding gave {arrow}, the lists {reference}"
        return reference
    assert isinstance(arrow, RowsEvent), f"arrow decoding raised {arrow}"
    assert arrow.row_count == reference.row_count
    if not arrow.row_count:
        return arrow  # the sink lands no empty event (writer.py skips them)
    expected, expected_zero = _land(reference, table, moved)
    got, got_zero = _land(arrow, table, moved)
    assert got.schema == expected.schema
    for name in expected.schema.names:
        a, b = expected.column(name), got.column(name)
        assert a.type == b.type and a.null_count == b.null_count, name
        assert [_norm(v) for v in a.to_pylist()] == [_norm(v) for v in b.to_pylist()], name
    assert got_zero == expected_zero
    return arrow


def _rows(rng: random.Random, count: int) -> list[bytes]:
    return [image([None if rng.random() < 0.15 else enc(rng) for _, enc in NAMED])
            for _ in range(count)]


def test_random_rows_of_every_type_land_alike() -> None:
    rng = random.Random(17)
    width = len(NAMED)
    for _ in range(ROUNDS // 10 + 1):
        rows = _rows(rng, rng.randrange(1, 8))
        event = _same(rows_body(width, rows), RowsKind.INSERT)
        assert isinstance(event, RowsEvent) and event.arrow is not None
        assert isinstance(event.after, LazyImage)
        pairs = _rows(rng, 2 * rng.randrange(1, 4))
        _same(rows_body(width, pairs, present2=range(width)), RowsKind.UPDATE)
        _same(rows_body(width, rows), RowsKind.DELETE)


def test_minimal_images_land_alike() -> None:
    rng = random.Random(3)
    width = len(NAMED)
    for _ in range(ROUNDS // 10 + 1):
        present = sorted(rng.sample(range(width), rng.randrange(1, width)))
        rows = [image([None if rng.random() < 0.2 else NAMED[i][1](rng) for i in present])
                for _ in range(rng.randrange(1, 5))]
        _same(rows_body(width, rows, present=present), RowsKind.DELETE)
        after = sorted(rng.sample(range(width), rng.randrange(1, width)))
        pairs = []
        for _ in range(rng.randrange(1, 4)):
            pairs.append(image([None if rng.random() < 0.2 else NAMED[i][1](rng)
                                for i in present]))
            pairs.append(image([None if rng.random() < 0.2 else NAMED[i][1](rng)
                                for i in after]))
        _same(rows_body(width, pairs, present=present, present2=after), RowsKind.UPDATE)


def test_truncated_and_corrupted_events_fail_alike() -> None:
    outcomes = corrupted_events(_same, _rows)
    assert set(outcomes) == {"ok", "RowDecodeError"}, outcomes


def test_which_columns_land_natively() -> None:
    """Chunks exactly where the layout is Arrow's: the fallbacks are per column and per event."""
    cols = [Col(T.LONG, name="id"), Col(T.VARCHAR, u16(80), charset=45, name="s"),
            Col(T.VARCHAR, u16(20), charset=8, name="latin"),
            Col(T.NEWDECIMAL, bytes([65, 30]), name="wide"), Col(T.DATE, name="d"),
            Col(T.TIMESTAMP2, b"\x00", name="ts")]
    table = _table(cols)
    good = image([b"\1\0\0\0", b"\2ok", b"\1\xe9", None, (2024 << 9 | 2 << 5 | 29)
                  .to_bytes(3, "little"), b"\0\0\0\1"])
    event = _same(rows_body(len(cols), [good]), RowsKind.INSERT, table)
    assert isinstance(event, RowsEvent) and event.arrow is not None
    chunks = event.arrow[1]
    assert [c if c is None else c[0] for c in chunks] == ["i4", "str", "str", None, "date", "ts"]
    # a string that is not UTF-8, a zero date and a zero TIMESTAMP: those columns of that
    # event fall back to the Python values (landed as today: replaced text, NULLs counted)
    bad = image([b"\2\0\0\0", b"\2\xff\xfe", None, None, b"\0\0\0", b"\0\0\0\0"])
    event = _same(rows_body(len(cols), [good, bad]), RowsKind.INSERT, table)
    assert isinstance(event, RowsEvent) and event.arrow is not None
    assert [c if c is None else c[0] for c in event.arrow[1]] == ["i4", None, "str", None, None,
                                                                  None]
    batch, zeros = _land(event, table)
    assert zeros == 2
    assert batch.column("s").to_pylist() == ["ok", "\ufffd\ufffd"]


def test_long_ascii_runs_before_a_bad_byte_fall_back_alike() -> None:
    """The UTF-8 check skips ASCII 32 and 8 bytes at a time: a byte that is not UTF-8 (or a
    cut or overlong sequence) right after a run of every length up to 80 still makes the
    column fall back, and valid text after one still lands natively. Rows big enough to
    outgrow the buffers sized for the event are landed alike too."""
    cols = [Col(T.LONG, name="id"), Col(T.BLOB, b"\x02", charset=45, name="s")]
    table = _table(cols)
    tails = [b"\xff", b"\x80", "é".encode()[:1], b"\xc0\xaf", "😀".encode(), "é".encode()]
    for run in range(81):
        for tail in tails:
            text = b"a" * run + tail + b"z" * (run % 9)
            row = image([run.to_bytes(4, "little"), len(text).to_bytes(2, "little") + text])
            event = _same(rows_body(len(cols), [row]), RowsKind.INSERT, table)
            assert isinstance(event, RowsEvent) and event.arrow is not None
            valid = tail in ("😀".encode(), "é".encode())
            assert (event.arrow[1][1] is not None) is valid, (run, tail)
    big = b"x" * 60_000  # one row's string over the event's own bytes (ENUM-free growth)
    rows = [image([k.to_bytes(4, "little"), len(big).to_bytes(2, "little") + big])
            for k in range(3)]
    event = _same(rows_body(len(cols), rows), RowsKind.INSERT, table)
    assert isinstance(event, RowsEvent) and event.arrow is not None
    assert event.arrow[1][1] is not None and len(event.arrow[1][1][3]) == 180_000


def test_key_changing_updates_land_alike() -> None:
    cols = [Col(T.LONG, name="id"), Col(T.VARCHAR, u16(80), charset=45, name="s")]
    table = _table(cols)
    table = dataclasses.replace(table, primary_key=(0,))
    rng = random.Random(5)
    pairs = []
    for i in range(6):
        pairs.append(image([i.to_bytes(4, "little"), _prefixed(1, 80, [b"x"])(rng)]))
        new_id = i + 100 if i % 2 else i
        pairs.append(image([new_id.to_bytes(4, "little"), _prefixed(1, 80, [b"y"])(rng)]))
    body = rows_body(2, pairs, present2=range(2))
    _same(body, RowsKind.UPDATE, table, moved=(1, 3, 5))


def test_batches_concatenate_many_events() -> None:
    """A group of events (the sink's batches) concatenates their chunks, NULL runs between."""
    rng = random.Random(11)
    width = len(NAMED)
    counter = new_counter()
    version = TableVersion.from_table_map(TABLE, 1, VersionOrigin(1), counter)
    for arrow in (False, True):
        group = []
        first = 0
        for i in range(12):
            present = sorted(rng.sample(range(width), rng.randrange(1, width))) if i % 3 \
                else list(range(width))
            rows = [image([None if rng.random() < 0.2 else NAMED[k][1](rng) for k in present])
                    for _ in range(rng.randrange(1, 6))]
            kind = RowsKind.INSERT if i % 2 else RowsKind.DELETE
            event = _decode(rows_body(width, rows, present=present), kind, arrow)
            assert isinstance(event, RowsEvent)
            group.append(PendingRows(event, TAGS, first, (), 1))
            first += event.row_count
        batch = rows_batch(version, group, with_commit_time=True)
        if arrow:
            got = batch
        else:
            expected = batch
        rng = random.Random(11)
    assert got.schema == expected.schema
    for name in expected.schema.names:
        assert [_norm(v) for v in got.column(name).to_pylist()] == \
            [_norm(v) for v in expected.column(name).to_pylist()], name


def test_an_extension_built_before_arrow_lands_from_python_values() -> None:
    """A stale in-place build (no decode_arrow yet) must not break decoding: no chunks."""
    body = rows_body(len(NAMED), _rows(random.Random(2), 3))
    with mock.patch.object(native, "ARROW", False):
        event = decode_rows_event(header(), memoryview(body), 8, {TABLE.table_id: TABLE},
                                  version=1, kind=RowsKind.INSERT,
                                  decoders=DecoderCache(arrow=True))
    assert event.arrow is None and isinstance(event.after, tuple) and event.row_count == 3


def test_the_switch_to_python_values() -> None:
    """``BINLAKE_NATIVE_ARROW=0`` (read at import) turns the Arrow chunks off, nothing else."""
    code = "from protocol.binlog import native; print(native.ENABLED, native.ARROW)"
    for value, expected in (("0", "True False"), ("1", "True True")):
        env = {**os.environ, "BINLAKE_NATIVE_ARROW": value, "BINLAKE_NATIVE": "1"}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, check=True).stdout
        assert out.strip() == expected


def test_concat_refuses_malformed_segments() -> None:
    with pytest.raises(ValueError):
        native_batch.concat("i4", [(("i4", 0, None, b"\0\0", None), 1)])  # 2 bytes for one int32
    with pytest.raises(ValueError):
        native_batch.concat("nope", [])
    with pytest.raises(ValueError):
        native_batch.concat("str", [(("str", 0, None, b"ab", b"\0\0\0\0"), 1)])  # offsets short
    assert native_batch.concat("i8", [(None, 3)]) == (3, 3, b"\0", b"\0" * 24, None)
    chunk = ("i4", 0, None, b"\1\0\0\0", None)
    assert native_batch.gather("i4", 0, [(None, (chunk,), [[1]], 1), (None, None, None, 2)]) == \
        (3, 2, b"\1", b"\1\0\0\0" + b"\0" * 8, None)
    assert native_batch.gather("i8", 0, [(None, (chunk,), [[1]], 1)]) is None  # another layout
    assert native_batch.gather("i4", 0, [(None, (None,), [[1]], 1)]) is None  # a fallback column
    assert native_batch.gather("i4", 0, [((None,), (chunk,), [[1]], 1)]) == (1, 1, b"\0", b"\0" * 4,
                                                                       None)  # absent: NULL
    for bad in ([(None, (chunk,), [[1]])], [((), (chunk,), [[1]], 1)], [("x", (), [[1]], 1)],
                [(None, (chunk,), [[1]], 2)]):
        with pytest.raises((ValueError, TypeError)):
            native_batch.gather("i4", 0, bad)


def test_unsigned_layouts_widen_to_the_sinks_type_and_nothing_else() -> None:
    """The decoder keeps an unsigned integer as it is (u1, u2, u4, u8); the sink's batch
    builder zero-extends it to the wider signed layout or the decimal(20,0) the lake's type
    asks for, and refuses anything that could change a value."""
    top = ("u4", 0, None, b"\xff\xff\xff\xff", None)
    assert native_batch.concat("i8", [(top, 1), (None, 1)]) == (
        2, 1, b"\x01", b"\xff\xff\xff\xff" + b"\0" * 12, None)
    big = ("u8", 0, None, b"\xff" * 8, None)
    assert native_batch.concat("dec", [(big, 1)]) == (1, 0, None, b"\xff" * 8 + b"\0" * 8, None)
    assert native_batch.gather("i8", 0, [(None, (top,), [[1]], 1)]) == (
        1, 0, None, b"\xff\xff\xff\xff" + b"\0" * 4, None)
    for tag, chunk in (("i4", top), ("i8", big), ("u4", ("i4", 0, None, b"\0" * 4, None)),
                       ("f8", big), ("i2", ("u2", 0, None, b"\0\0", None))):
        assert native_batch.gather(tag, 0, [(None, (chunk,), [[1]], 1)]) is None, (tag, chunk)
        with pytest.raises(ValueError):
            native_batch.concat(tag, [(chunk, 1)])


def _mixed_cost() -> None:
    """Per-row CPU of decode + convert on workload (a)'s shape (8 mixed columns, events of ~30
    rows as a server writes them, batches of 4096 rows): lists + pa.array vs Arrow chunks.
    ``python -m tests.unit.test_native_arrow``."""
    from tests.unit.test_native_rows import _decimal, _pick
    cols = [(Col(T.LONG, name="id"), _int(4, False)), (Col(T.LONGLONG, name="big"), _int(8, False)),
            (Col(T.VARCHAR, u16(256), charset=45, name="name"),
             _prefixed(2, 64, [b"name-", b"1", b"7"])),
            (Col(T.NEWDECIMAL, bytes([12, 2]), name="amount"), _decimal(12, 2)),
            (Col(T.DATETIME2, bytes([6]), name="ts"), _dt2(6)),
            (Col(T.DOUBLE, b"\x08", name="ratio"), lambda r: r.random().hex().encode()[:8]),
            (Col(T.BLOB, b"\x02", charset=45, name="note"), _prefixed(2, 240, [b"lorem ipsum "])),
            (Col(T.STRING, bytes([T.ENUM, 1]), labels=("new", "active", "suspended", "closed"),
                 name="state"), _pick([b"\x01", b"\x02", b"\x03", b"\x04"]))]
    table = _table([c for c, _ in cols])
    rng = random.Random(1)
    bodies = []
    for _ in range(137):  # 137 events of 30 rows: one 4110-row batch
        rows = []
        for _ in range(30):
            values = [enc(rng) for _, enc in cols]
            values[4] = (((2024 * 13 + 5) << 5 | 17) << 17 | 12 << 12 | 30 << 6 | 15
                         ).__add__(1 << 39).to_bytes(5, "big") + b"\1\2\3"
            rows.append(image([None if k and rng.random() < 0.05 else v
                               for k, v in enumerate(values)]))
        bodies.append(rows_body(len(cols), rows))
    counter = new_counter()
    version = TableVersion.from_table_map(table, 1, VersionOrigin(1), counter)
    for arrow in (False, True):
        cache = DecoderCache(arrow=arrow)
        spent_decode = spent_convert = 0.0
        rows_done = 0
        started = time.process_time()
        while time.process_time() - started < 3.0:
            t0 = time.process_time()
            group = []
            for body in bodies:
                event = decode_rows_event(header(), memoryview(body), 8,
                                          {table.table_id: table}, version=1,
                                          kind=RowsKind.INSERT, decoders=cache)
                group.append(PendingRows(event, TAGS, 0, (), 1))
                rows_done += event.row_count
            t1 = time.process_time()
            rows_batch(version, group, with_commit_time=True)
            t2 = time.process_time()
            spent_decode += t1 - t0
            spent_convert += t2 - t1
        print(f"{'arrow' if arrow else 'lists'}: decode {spent_decode / rows_done * 1e6:.3f} "
              f"+ convert {spent_convert / rows_done * 1e6:.3f} = "
              f"{(spent_decode + spent_convert) / rows_done * 1e6:.3f} µs/row")


if __name__ == "__main__":
    _mixed_cost()
