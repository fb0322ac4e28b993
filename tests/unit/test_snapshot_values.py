"""Snapshot reads (``protocol.snapshot``), server-free: the TABLE_MAP built from an
information_schema description equals the one the binlog (FULL) or the daemon's enrichment
(MINIMAL, NO_LOG) gives, and SELECT text converts to exactly the row decoder's values."""

from __future__ import annotations

import datetime
import struct
from decimal import Decimal

import pytest

from protocol.binlog.coltypes import FieldType, resolve_string_meta
from protocol.binlog.enrich import ColumnDescription, TableDescription, enrich_table_map
from protocol.binlog.model import ColumnFlag, RowsKind
from protocol.binlog.rows import decode_rows_event
from protocol.binlog.tablemap import decode_table_map
from protocol.binlog.values import InvalidTemporal
from protocol.results import TEXT_DEFAULT, TEXT_FLOAT, TEXT_INT, TEXT_UTF8
from protocol.snapshot import (
    SESSION_SETUP,
    SnapshotTable,
    UnsupportedColumn,
    choose_key,
    snapshot_table,
)
from protocol.snapshot.tablemap import binlog_column, snapshot_table_map
from protocol.snapshot.values import converter_for, quote_name, select_expression
from sinks.parquet.schema import signature

from .rowbuild import Col, header, image, rows_body, table_map_body

UTF8MB4, LATIN1 = 45, 8
D = ColumnDescription

DESCRIPTION = TableDescription("db", "t", (
    D("id", "int", False, unsigned=True),
    D("v", "varchar", True, charset="utf8mb4", collation=UTF8MB4, octet_length=80),
    D("c", "char", True, charset="utf8mb4", collation=UTF8MB4, octet_length=1020),
    D("f", "float", True),
    D("e", "enum", True, charset="latin1", collation=LATIN1, enum_values=("a", "b")),
    D("ts", "timestamp", True, fsp=3),
    D("b", "bit", True, precision=10),
    D("raw", "varbinary", True, charset=None, octet_length=4),
), primary_key=("id",))

# The same table as the server's TABLE_MAP with binlog_row_metadata=FULL: the type bytes and
# metadata words, then names, signedness, charsets, labels and the key.
FULL_COLUMNS = [
    Col(FieldType.LONG, nullable=False, name="id", unsigned=True),
    Col(FieldType.VARCHAR, (80).to_bytes(2, "little"), name="v", charset=UTF8MB4),
    Col(FieldType.STRING, bytes([0xFE ^ 0x30, 1020 & 0xFF]), name="c", charset=UTF8MB4),
    Col(FieldType.FLOAT, b"\x04", name="f"),
    Col(FieldType.STRING, bytes([FieldType.ENUM, 1]), name="e", charset=LATIN1,
        labels=("a", "b")),
    Col(FieldType.TIMESTAMP2, b"\x03", name="ts"),
    Col(FieldType.BIT, bytes([2, 1]), name="b"),
    Col(FieldType.VARCHAR, (4).to_bytes(2, "little"), name="raw", charset=63),
]


def _binlog_table_map(names: bool = True):  # type: ignore[no-untyped-def]
    body = table_map_body(FULL_COLUMNS, numeric=[0, 3] if names else [],
                          character=[1, 2, 7] if names else [], enums=[4] if names else [],
                          pk=[0] if names else [], names=names)
    if names:  # the ENUM's charset travels in ENUM_AND_SET_COLUMN_CHARSET (11)
        body += bytes([11, 1, LATIN1])
    return decode_table_map(header(), body, 8)


def test_full_table_map_equals_the_binlogs() -> None:
    theirs = _binlog_table_map()
    ours = snapshot_table_map(DESCRIPTION, mysql=False, row_metadata="FULL")
    assert ours.columns == theirs.columns
    assert ours.primary_key == theirs.primary_key == (0,)
    assert signature(ours) == signature(theirs)
    assert resolve_string_meta(ours.columns[2].meta) == (FieldType.STRING, 1020)


@pytest.mark.parametrize("mode", ["NO_LOG", "MINIMAL", "absent"])
def test_without_full_metadata_it_is_the_daemons_enrichment(mode: str) -> None:
    bare = _binlog_table_map(names=False)
    daemon = enrich_table_map(bare, DESCRIPTION)
    assert daemon.applied
    ours = snapshot_table_map(DESCRIPTION, mysql=False, row_metadata=mode)
    assert signature(ours) == signature(daemon.table)
    assert ours.described_by == "information_schema"


def test_unique_and_generated_flags_follow_the_mode() -> None:
    description = TableDescription("db", "u", (D("k", "int", False, unique=True),))
    full = snapshot_table_map(description, mysql=True, row_metadata="FULL")
    assert not full.columns[0].flags & ColumnFlag.UNIQUE  # the binlog never says UNIQUE
    enriched = snapshot_table_map(description, mysql=True, row_metadata="NO_LOG")
    assert enriched.columns[0].flags & ColumnFlag.UNIQUE  # the schema source does


def test_rows_decode_like_the_binlog() -> None:
    """One row through the binlog's row decoder and through SELECT text: the same values."""
    table_map = _binlog_table_map()
    ts = struct.pack(">I", 1700000000) + struct.pack(">H", 1230)  # .123 as 1230 (fsp 3)
    body = rows_body(8, [image([
        struct.pack("<I", 4000000000), bytes([5]) + "héllo".encode()[:5] + b"",
        (3).to_bytes(2, "little") + b"abc", struct.pack("<f", 3.14), bytes([2]), ts,
        (0b1010101010).to_bytes(2, "big"), bytes([2]) + b"\x00\xff"])])
    event = decode_rows_event(header(30), body, 8, {42: table_map}, version=1,
                              kind=RowsKind.INSERT)
    snap = snapshot_table(DESCRIPTION, mysql=False, row_metadata="FULL")
    text_row = ("4000000000", "héllo".encode()[:5], b"abc", "3.140000104904175", "2",
                "1700000000.123", "682", b"\x00\xff")
    assert snap.decode_rows([text_row]) == event.after
    assert snap.decode_rows([(None,) * 8]) == tuple([None] for _ in range(8))


def test_select_list_makes_every_value_exact() -> None:
    snap = snapshot_table(DESCRIPTION, mysql=False, row_metadata="FULL")
    assert snap.select_list == (
        "`id`, `v`, `c`, CAST(`f` AS DOUBLE), "
        "CAST(`e` AS UNSIGNED), UNIX_TIMESTAMP(`ts`), CAST(`b` AS UNSIGNED), `raw`")
    # strings are their stored bytes only on a connection that converts no results
    assert SESSION_SETUP == ("SET SESSION character_set_results = NULL",)
    assert snap.key_columns == (0,)
    assert quote_name("we`ird") == "`we``ird`"


def _convert(d: ColumnDescription, raw: bytes | str, *, mysql: bool = False) -> object:
    column = snapshot_table_map(TableDescription("db", "t", (d,)), mysql=mysql,
                                row_metadata="FULL").columns[0]
    return converter_for(column, d.data_type)(raw)


def test_temporal_conversions() -> None:
    assert _convert(D("d", "date", True), "2024-02-29") == datetime.date(2024, 2, 29)
    assert _convert(D("d", "date", True), "0000-00-00") == InvalidTemporal("0000-00-00")
    assert _convert(D("d", "date", True), "2024-00-10") == InvalidTemporal("2024-00-10")
    dt = D("dt", "datetime", True, fsp=3)
    assert _convert(dt, "2024-02-29 12:34:56.789") == datetime.datetime(
        2024, 2, 29, 12, 34, 56, 789000)
    assert _convert(dt, "0000-00-00 00:00:00.000") == InvalidTemporal("0000-00-00 00:00:00.000")
    ts = D("ts", "timestamp", True, fsp=6)
    assert _convert(ts, "0.000000") == InvalidTemporal("0000-00-00 00:00:00.000000")
    assert _convert(D("ts", "timestamp", True), "0") == InvalidTemporal("0000-00-00 00:00:00")
    assert _convert(ts, "1.000001") == datetime.datetime(1970, 1, 1, 0, 0, 1, 1,
                                                         tzinfo=datetime.UTC)
    t = D("t", "time", True, fsp=6)
    assert _convert(t, "-838:59:59.000000") == -datetime.timedelta(hours=838, minutes=59,
                                                                    seconds=59)
    assert _convert(t, "-00:00:00.000001") == -datetime.timedelta(microseconds=1)
    assert _convert(D("t", "time", True, fsp=1), "-01:00:00.5") == -datetime.timedelta(
        hours=1, microseconds=500000)


def test_number_and_label_conversions() -> None:
    assert _convert(D("f", "float", True), "3.140000104904175") == struct.unpack(
        "<f", struct.pack("<f", 3.14))[0]
    assert _convert(D("x", "double", True), "-2.2250738585072014e-308") == -2.2250738585072014e-308
    assert str(_convert(D("n", "decimal", True, precision=65, scale=30), "-0.5" + "0" * 29)) == \
        "-0.5" + "0" * 29
    assert _convert(D("n", "decimal", True, precision=5, scale=2), "-0.00") == Decimal("-0.00")
    assert _convert(D("b", "bigint", True, unsigned=True), "18446744073709551615") == 2**64 - 1
    assert _convert(D("y", "year", True), "0000") == 0
    assert _convert(D("b", "bit", True, precision=64), "18446744073709551615") == 2**64 - 1
    e = D("e", "enum", True, charset="utf8mb4", enum_values=("a", "b"))
    assert [_convert(e, x) for x in ("0", "1", "2")] == ["", "a", "b"]
    s = D("s", "set", True, charset="utf8mb4", set_values=("x", "y", "z"))
    assert [_convert(s, x) for x in ("0", "5", "7")] == ["", "x,z", "x,y,z"]


def test_string_conversions_keep_bytes_where_the_binlog_does() -> None:
    latin1 = D("l", "varchar", True, charset="latin1", collation=LATIN1, octet_length=20)
    assert _convert(latin1, b"\x80\xe9") == "€é"
    sjis = D("s", "varchar", True, charset="sjis", collation=13, octet_length=10)
    assert _convert(sjis, b"\x81\x5f") == "\\"  # the server's table, not Python's codec
    utf8 = D("u", "varchar", True, charset="utf8mb4", collation=UTF8MB4, octet_length=20)
    assert _convert(utf8, b"\xff") == b"\xff"  # not valid UTF-8: bytes, as the binlog's
    assert _convert(utf8, "é".encode()) == "é"
    assert _convert(utf8, b"\xff".decode("utf-8", "surrogateescape")) == b"\xff"
    assert _convert(D("b", "blob", True), b"\x00\x01") == b"\x00\x01"
    assert _convert(D("j", "json", True), '{"a": 1}', mysql=True) == '{"a": 1}'
    assert _convert(D("j", "json", True, charset="utf8mb4", collation=46), b'{"a":1}') == \
        '{"a":1}'  # MariaDB: a LONGTEXT
    assert _convert(D("v", "vector", True, octet_length=8), "0000C03F00000040", mysql=True) == \
        struct.pack("<2f", 1.5, 2.0)
    assert _convert(D("u", "uuid", True), "123e4567-e89b-12d3-a456-426614174000") == \
        bytes.fromhex("123e4567e89b12d3a456426614174000")
    assert _convert(D("i", "inet4", True), "10.0.0.1") == b"\n\x00\x00\x01"
    assert _convert(D("i", "inet6", True), "::ffff:10.0.0.1") == bytes(10) + b"\xff\xff\n\x00\x00\x01"
    assert _convert(D("g", "point", True), b"\x00\x00\x00\x00\x01") == b"\x00\x00\x00\x00\x01"


def test_type_bytes_and_metadata() -> None:
    def col(d: ColumnDescription, mysql: bool = False):  # type: ignore[no-untyped-def]
        return binlog_column(0, d, mysql=mysql)

    assert (col(D("b", "bit", True, precision=10)).meta, col(D("b", "bit", True,
                                                              precision=10)).length) == (0x102, 10)
    assert col(D("t", "tinytext", True)).type_code == FieldType.BLOB
    assert col(D("t", "mediumblob", True)).meta == 3
    assert col(D("j", "json", True)).type_code == FieldType.BLOB  # MariaDB: LONGTEXT
    assert col(D("j", "json", True), mysql=True).type_code == FieldType.JSON
    assert col(D("e", "enum", True, enum_values=tuple(map(str, range(300))))).length == 2
    assert col(D("s", "set", True, set_values=tuple(map(str, range(40))))).length == 8
    assert col(D("u", "uuid", True)).length == 16
    assert col(D("p", "point", True)).type_code == FieldType.GEOMETRY
    assert select_expression(col(D("u", "uuid", True)), "u", "uuid") == "`u`"
    with pytest.raises(UnsupportedColumn):
        col(D("x", "sometype", True))


def test_choose_key() -> None:
    cols = (D("a", "int", False), D("b", "int", True), D("c", "int", False), D("d", "int", False))
    no_pk = TableDescription("db", "t", cols)
    assert choose_key(TableDescription("db", "t", cols, ("c", "a")), []) == (2, 0)
    assert choose_key(no_pk, [("u_b", ["b"]), ("u_cd", ["c", "d"]), ("u_a", ["a"])]) == (0,)
    assert choose_key(no_pk, [("u_b", ["b"])]) == ()  # nullable: not a key
    assert choose_key(no_pk, [("z", ["d"]), ("y", ["c"])]) == (2,)  # ties by name
    assert choose_key(no_pk, []) == ()


def test_decode_rows_checks_the_width() -> None:
    snap = snapshot_table(DESCRIPTION, mysql=False, row_metadata="FULL")
    assert isinstance(snap, SnapshotTable)
    assert snap.decode_rows([]) == tuple([] for _ in range(8))
    with pytest.raises(ValueError, match="a row of 2 values"):
        snap.decode_rows([("1", "2")])


def test_mariadb_counts_geometry_among_character_columns() -> None:
    """MariaDB's charset TLVs have an entry (binary) for each GEOMETRY column, MySQL's do not:
    read MariaDB's the MySQL way and the string after a GEOMETRY gets the wrong collation (seen
    on 10.11 and 11.8 with binlog_row_metadata=FULL: cp1251 text decoded as UTF-16)."""
    cols = [Col(FieldType.GEOMETRY, b"\x04", name="g"),
            Col(FieldType.VARCHAR, (10).to_bytes(2, "little"), name="v", charset=51)]
    body = table_map_body(cols, character=[0, 1])  # COLUMN_CHARSET: 63 for g, then 51
    mariadb = decode_table_map(header(), body, 8, mariadb=True)
    assert [c.charset for c in mariadb.columns] == [None, 51]
    mysql = decode_table_map(header(), table_map_body(cols, character=[1]), 8)
    assert [c.charset for c in mysql.columns] == [None, 51]


WIDE = TableDescription("db", "w", (
    D("id", "bigint", False), D("amount", "decimal", True, precision=12, scale=2),
    D("at", "datetime", True, fsp=6), D("ratio", "double", True),
    D("name", "varchar", True, charset="utf8mb4", collation=UTF8MB4, octet_length=256),
    D("state", "enum", True, charset="latin1", collation=LATIN1, enum_values=("new", "old")),
    D("ts", "timestamp", True, fsp=0),
), primary_key=("id",))


@pytest.mark.parametrize("with_null", [False, True])
def test_column_at_a_time_equals_value_by_value(with_null: bool) -> None:
    """decode_rows converts NULL-free columns with C-level map: the values (and their types)
    must be exactly the per-value converters', also for str/bytes mixes and invalid dates."""
    snap = snapshot_table(WIDE, mysql=False, row_metadata="FULL")
    rows: list[tuple[bytes | str | None, ...]] = [
        ("1", "12.30", "2024-01-01 00:00:00.000123", "0.1", "héllo".encode(), "1", "1700000000"),
        (b"-9", b"-0.05", "0000-00-00 00:00:00.000000", b"1e300", b"\xff\xfe", b"2", "0"),
        ("9223372036854775807", "9999999999.99", "2024-02-29 23:59:59", "-0", "héllo", "0",
         "1"),
    ]
    if with_null:
        rows.append((None,) * 7)
    columns = list(zip(*rows, strict=True))
    expected = tuple([None if v is None else convert(v) for v in column]
                     for convert, column in zip(snap._converters, columns, strict=True))
    got = snap.decode_rows(rows)
    assert got == expected
    assert [[type(v) for v in c] for c in got] == [[type(v) for v in c] for c in expected]
    assert got[2][1] == InvalidTemporal("0000-00-00 00:00:00.000000")
    assert snap.decode_rows(rows[:1])[2] == [datetime.datetime(2024, 1, 1, 0, 0, 0, 123)]


@pytest.mark.parametrize("with_null", [False, True])
def test_decode_columns_of_a_converted_read_equals_decode_rows(with_null: bool) -> None:
    """A columnar read with ``wire_kinds`` (int/float/UTF-8 made while parsing, ENUM indexes as
    int) decodes to decode_rows' values of the same text; an unconverted one (the Python path,
    or numbers kept as text) too."""
    snap = snapshot_table(WIDE, mysql=False, row_metadata="FULL")
    assert list(snap.wire_kinds) == [TEXT_INT, TEXT_DEFAULT, TEXT_DEFAULT, TEXT_FLOAT,
                                     TEXT_UTF8, TEXT_INT, TEXT_DEFAULT]
    rows: list[tuple[bytes | str | None, ...]] = [
        ("1", "12.30", "2024-01-01 00:00:00.000123", "0.1", "héllo".encode(), "1", "1700000000"),
        ("-9", "-0.05", "0000-00-00 00:00:00.000000", "1e300", b"\xff\xfe", "2", "0"),
    ]
    if with_null:
        rows.append((None,) * 7)
    expected = snap.decode_rows(rows)
    text = [list(column) for column in zip(*rows, strict=True)]
    kinds = {TEXT_INT: int, TEXT_FLOAT: float}
    converted = [column if kind not in kinds and kind != TEXT_UTF8 else
                 [None if v is None else snap._converters[k](v) if kind == TEXT_UTF8 else
                  kinds[kind](v) for v in column]
                 for k, (kind, column) in enumerate(zip(snap.wire_kinds, text, strict=True))]
    key = [["k"] * len(rows)]  # a trailing key column is ignored
    for values, flag in ((converted + key, True), (text, False), (converted, False)):
        got = snap.decode_columns(values, flag)
        assert got == expected
        assert [[type(v) for v in c] for c in got] == [[type(v) for v in c] for c in expected]
    with pytest.raises(ValueError):
        snap.decode_columns(text[:3], False)
    with pytest.raises(ValueError):
        snap.decode_columns([*text[:6], text[6][:1]], False)
