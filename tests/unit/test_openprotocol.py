"""TiCDC Open Protocol encoding (seed 000) of hand-built transaction items."""

from __future__ import annotations

import datetime as dt
import decimal

from protocol.binlog.model import (
    BinlogPosition,
    Column,
    ColumnFlag,
    EventHeader,
    RowsEvent,
    RowsKind,
    TableMapEvent,
)
from protocol.binlog.transactions import TransactionBegin, TransactionCommit
from sinks.openprotocol import OpenProtocolEncoder, dumps, encode_value, open_type_code

HDR = EventHeader(timestamp=1_700_000_000, type_code=30, server_id=1, event_size=0,
                  log_pos=0, flags=0, file="mysql-bin.000001", position=100, next_position=200)


def _table() -> TableMapEvent:
    cols = (
        Column(0, 3, 0, "id", ColumnFlag.NONE),
        Column(1, 15, 64, "val", ColumnFlag.NULLABLE, charset=45),
        Column(2, 252, 2, "body", ColumnFlag.NULLABLE | ColumnFlag.BINARY, charset=63),
        Column(3, 247, 1, "kind", ColumnFlag.NULLABLE, enum_values=("a", "b", "c")),
        Column(4, 248, 1, "tags", ColumnFlag.NULLABLE, set_values=("x", "y", "z")),
        Column(5, 246, 0, "price", ColumnFlag.NULLABLE, precision=12, scale=2),
        Column(6, 18, 6, "at", ColumnFlag.NULLABLE),
        Column(7, 8, 0, "big", ColumnFlag.UNSIGNED),
    )
    return TableMapEvent(HDR, 7, 0, "test", "t1", cols, primary_key=(0,), has_full_metadata=True)


def _rows(kind: RowsKind, before: list[list[object]] | None,
          after: list[list[object]] | None) -> RowsEvent:
    table = _table()
    every = tuple(range(len(table.columns)))
    count = len((before or after or [[]])[0])
    return RowsEvent(
        HDR, kind, table, 0, count,
        every if before is not None else (), every if after is not None else (),
        tuple(before) if before is not None else None,
        tuple(after) if after is not None else None,
    )


def _items(encoder: OpenProtocolEncoder, *items: object) -> list[dict[str, object]]:
    out = []
    for item in items:
        out.extend(encoder.encode(item))  # type: ignore[arg-type]
    return out


def _begin(ts: int = 1_700_000_000) -> TransactionBegin:
    return TransactionBegin(None, BinlogPosition("mysql-bin.000001", 4), ts, 1)


def _commit() -> TransactionCommit:
    pos = BinlogPosition("mysql-bin.000001", 4)
    return TransactionCommit(None, pos, BinlogPosition("mysql-bin.000001", 900), 0, 1)


def test_insert_row_follows_the_column_type_table() -> None:
    row = [[1], ["aa"], [b"\x89PNG"], ["b"], ["x,z"], [decimal.Decimal("129012.12")],
           [dt.datetime(2015, 12, 20, 23, 58, 58, 500000)], [18446744073709551615]]
    out = _items(OpenProtocolEncoder(), _begin(), _rows(RowsKind.INSERT, None, row), _commit())
    assert [o["key"]["t"] for o in out] == [1, 3]  # type: ignore[index]
    key = out[0]["key"]
    assert key == {"ts": (1_700_000_000_000 << 18), "scm": "test", "tbl": "t1", "t": 1}
    u = out[0]["value"]["u"]  # type: ignore[index]
    assert u["id"] == {"t": 3, "h": True, "f": 0x0A, "v": 1}
    assert u["val"] == {"t": 15, "f": 0x40, "v": "aa"}
    assert u["body"]["t"] == 252 and u["body"]["v"] == "iVBORw=="  # base64
    assert u["kind"]["v"] == 2 and u["kind"]["t"] == 247  # ENUM as its 1-based index
    assert u["tags"]["v"] == 0b101  # SET as its bitmask
    assert u["price"] == {"t": 246, "f": 0x40, "v": "129012.12"}
    assert u["at"]["t"] == 12 and u["at"]["v"] == "2015-12-20 23:58:58.5"
    assert u["big"] == {"t": 8, "f": 0x80, "v": 18446744073709551615}
    assert out[1] == {"key": {"ts": key["ts"], "t": 3}, "value": None}  # type: ignore[index]
    assert "\n" not in dumps(out[0])


def test_update_carries_old_value_and_pk_change_splits_into_delete_insert() -> None:
    before = [[2, 3], ["aa", "cc"], [None, None], ["a", "a"], ["", ""],
              [None, None], [None, None], [0, 0]]
    after = [[2, 4], ["bb", "cc"], [None, None], ["a", "a"], ["", ""],
             [None, None], [None, None], [0, 0]]
    out = _items(OpenProtocolEncoder(), _begin(), _rows(RowsKind.UPDATE, before, after))
    assert out[0]["value"]["u"]["val"]["v"] == "bb"  # type: ignore[index]
    assert out[0]["value"]["p"]["val"]["v"] == "aa"  # type: ignore[index]
    assert list(out[1]["value"]) == ["d"] and out[1]["value"]["d"]["id"]["v"] == 3  # type: ignore[index]
    assert list(out[2]["value"]) == ["u"] and out[2]["value"]["u"]["id"]["v"] == 4  # type: ignore[index]
    assert out[0]["value"]["u"]["kind"]["v"] == 1 and out[0]["value"]["u"]["tags"]["v"] == 0  # type: ignore[index]


def test_ts_strictly_increases_even_when_the_clock_does_not() -> None:
    enc = OpenProtocolEncoder()
    first = _items(enc, _begin(100), _commit())[0]["key"]["ts"]  # type: ignore[index]
    second = _items(enc, _begin(99), _commit())[0]["key"]["ts"]  # type: ignore[index]
    third = _items(enc, _begin(101), _commit())[0]["key"]["ts"]  # type: ignore[index]
    assert first < second < third
    assert third >> 18 == 101_000


def test_value_edge_cases() -> None:
    time_col = Column(0, 19, 3, "t", ColumnFlag.NONE)
    assert encode_value(time_col, 11, dt.timedelta(hours=-838, minutes=-59, seconds=-59)) == \
        "-838:59:59"
    assert encode_value(time_col, 11, -dt.timedelta(microseconds=1500)) == "-00:00:00.0015"
    ts_col = Column(0, 17, 0, "ts", ColumnFlag.NONE)
    aware = dt.datetime(2024, 2, 29, 12, 0, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    assert encode_value(ts_col, 7, aware) == "2024-02-29 10:00:00"
    vb = Column(0, 15, 10, "vb", ColumnFlag.BINARY)
    assert encode_value(vb, 15, b"\x89PNG\r\n\x1a\n") == "\\x89PNG\\r\\n\\x1a\\n"
    assert encode_value(vb, 15, None) is None
    assert open_type_code(Column(0, 252, 4, "l", ColumnFlag.NONE)) == 251
    assert open_type_code(Column(0, 252, 1, "l", ColumnFlag.NONE)) == 249
    assert open_type_code(Column(0, 17, 0, "ts", ColumnFlag.NONE)) == 7


def test_ddl_event_carries_the_seed_type_code() -> None:
    from protocol.binlog.transactions import Statement

    pos = BinlogPosition("mysql-bin.000001", 4)
    ddl = Statement("test", "ALTER TABLE t1 ADD COLUMN c INT", True, pos, 1_700_000_000)
    out = _items(OpenProtocolEncoder(), _begin(), ddl, _commit())
    assert out[0]["key"] == {"ts": out[1]["key"]["ts"], "scm": "test", "tbl": "t1", "t": 2}  # type: ignore[index]
    assert out[0]["value"] == {"q": "ALTER TABLE t1 ADD COLUMN c INT", "t": 5}
