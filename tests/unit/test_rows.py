"""TABLE_MAP and row decoding on hand-built bytes: every type family, edge values, images,
PARTIAL_UPDATE JSON diffs, and truncated/corrupted input giving typed errors."""

from __future__ import annotations

import datetime
import functools
import os
import random
import struct
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.binlog import values
from protocol.binlog.coltypes import FieldType as T
from protocol.binlog.coltypes import codec_for_collation, resolve_string_meta
from protocol.binlog.filereader import split_binlog
from protocol.binlog.model import RowsKind, TableMapEvent
from protocol.binlog.rows import DecoderCache, decode_rows_event
from protocol.binlog.stream import EventStream
from protocol.binlog.tablemap import decode_table_map
from protocol.errors import ChecksumMismatch, EventDecodeError, RowDecodeError, UnknownTable
from tests.unit.rowbuild import (
    Col,
    header,
    i32,
    image,
    lenenc,
    lenenc_str,
    rows_body,
    table_map_body,
    u16,
)

UTC = datetime.UTC


def tm(cols: list[Col], **kw: Any) -> TableMapEvent:
    return decode_table_map(header(19), memoryview(table_map_body(cols, **kw)), 8)


DECODERS = DecoderCache()  # this module's, as a stream owns its own


def decode(table: TableMapEvent, body: bytes, kind: RowsKind = RowsKind.INSERT,
           version: int = 1, partial: bool = False) -> Any:
    return decode_rows_event(header(30 if version == 2 else 23), memoryview(body),
                             10 if version == 2 else 8, {table.table_id: table},
                             version=version, kind=kind, partial=partial, decoders=DECODERS)


def one(col: Col, stored: bytes | None, **kw: Any) -> Any:
    """Decode a single value of a one-column table (plus nothing else)."""
    table = tm([col], **kw)
    ev = decode(table, rows_body(1, [image([stored])]))
    assert ev.row_count == 1 and ev.after_columns == (0,)
    return ev.after[0][0]


# --- values ------------------------------------------------------------------------------------


def test_decimal_vector_from_notes() -> None:
    assert values.decode_decimal(bytes.fromhex("810DFB38D204D2"), 0, 14, 4) == (
        Decimal("1234567890.1234"), 7)
    assert values.decode_decimal(bytes.fromhex("7EF204C72DFB2D"), 0, 14, 4) == (
        Decimal("-1234567890.1234"), 7)


def _decimal_bytes(text: str, precision: int, scale: int) -> bytes:
    """Independent encoder (digit-group by digit-group) for round-trip checks."""
    d2b = [0, 1, 1, 2, 2, 3, 3, 4, 4, 4]
    negative = text.startswith("-")
    whole, _, frac = text.lstrip("-").partition(".")
    intg = precision - scale
    whole = whole.rjust(intg, "0")
    frac = frac.ljust(scale, "0")
    out = b""
    ix = intg % 9
    if ix:
        out += int(whole[:ix]).to_bytes(d2b[ix], "big")
    for k in range(ix, intg, 9):
        out += int(whole[k:k + 9]).to_bytes(4, "big")
    for k in range(0, scale - scale % 9, 9):
        out += int(frac[k:k + 9]).to_bytes(4, "big")
    if scale % 9:
        out += int(frac[scale - scale % 9:]).to_bytes(d2b[scale % 9], "big")
    raw = bytearray(out)
    raw[0] ^= 0x80
    if negative:
        raw = bytearray(b ^ 0xFF for b in raw)
    return bytes(raw)


@pytest.mark.parametrize("text,p,s", [
    ("0", 1, 0), ("9", 1, 0), ("-9", 1, 0), ("0.5", 1, 1), ("-0.99999", 5, 5),
    ("12345678901234567890123456789012345.123456789012345678901234567890", 65, 30),
    ("-99999999999999999999999999999999999.999999999999999999999999999999", 65, 30),
    ("-0.000000000000000000000000000001", 65, 30), ("123456789", 9, 0), ("-1.5", 10, 1),
    ("18446744073709551615", 20, 0),
])
def test_decimal_round_trip(text: str, p: int, s: int) -> None:
    stored = _decimal_bytes(text, p, s)
    assert len(stored) == values.decimal_size(p, s)
    col = Col(T.NEWDECIMAL, bytes([p, s]))
    assert one(col, stored) == Decimal(text)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_decimal_inline_decoder_matches_the_reference(data: st.DataObject) -> None:
    """The generated (inline) DECIMAL code and ``values.decode_decimal`` agree on every
    precision/scale, both signs, and keep the declared scale as the exponent."""
    p = data.draw(st.integers(1, 65))
    s = data.draw(st.integers(0, min(p, 30)))
    whole = data.draw(st.integers(0, 10 ** (p - s) - 1))
    frac = data.draw(st.integers(0, 10 ** s - 1))
    sign = data.draw(st.sampled_from(["", "-"]))
    text = f"{sign}{whole}" + (f".{frac:0{s}d}" if s else "")
    stored = _decimal_bytes(text, p, s)
    value = one(Col(T.NEWDECIMAL, bytes([p, s])), stored)
    reference, size = values.decode_decimal(stored, 0, p, s)
    assert size == len(stored)
    assert value.as_tuple() == reference.as_tuple() == Decimal(text).as_tuple()


def test_decimal_corrupt_group_is_an_error() -> None:
    col = Col(T.NEWDECIMAL, bytes([9, 0]))
    table = tm([col])
    bad = (0x80000000 | 999_999_999 + 1).to_bytes(4, "big")
    with pytest.raises(RowDecodeError):
        decode(table, rows_body(1, [image([bad])]))


@pytest.mark.parametrize("type_code,stored,unsigned,expected", [
    (T.TINY, b"\x80", False, -128), (T.TINY, b"\xff", True, 255), (T.TINY, b"\x7f", False, 127),
    (T.SHORT, b"\x00\x80", False, -32768), (T.SHORT, b"\xff\xff", True, 65535),
    (T.INT24, b"\x00\x00\x80", False, -8388608), (T.INT24, b"\xff\xff\xff", True, 16777215),
    (T.LONG, b"\x00\x00\x00\x80", False, -2**31), (T.LONG, b"\xff" * 4, True, 2**32 - 1),
    (T.LONGLONG, b"\x00" * 7 + b"\x80", False, -2**63), (T.LONGLONG, b"\xff" * 8, True, 2**64 - 1),
    (T.YEAR, b"\xff", False, 2155), (T.YEAR, b"\x00", False, 0), (T.YEAR, b"\x01", False, 1901),
])
def test_integers(type_code: int, stored: bytes, unsigned: bool, expected: int) -> None:
    col = Col(type_code, unsigned=unsigned)
    assert one(col, stored, numeric=[0] if type_code != T.YEAR else []) == expected


def test_integers_without_signedness_metadata_are_signed() -> None:
    assert one(Col(T.TINY), b"\xff", names=False) == -1


def test_floats() -> None:
    assert one(Col(T.FLOAT, b"\x04"), struct.pack("<f", 3.5)) == 3.5
    assert one(Col(T.DOUBLE, b"\x08"), struct.pack("<d", -1e308)) == -1e308


@pytest.mark.parametrize("bits,stored,expected", [
    (1, b"\x01", 1), (10, b"\x02\xaa", 0x2AA), (64, b"\xff" * 8, 2**64 - 1), (8, b"\x80", 128),
])
def test_bit(bits: int, stored: bytes, expected: int) -> None:
    meta = bytes([bits % 8, bits // 8])
    assert one(Col(T.BIT, meta), stored) == expected


def _date(y: int, m: int, d: int) -> bytes:
    return ((y << 9) | (m << 5) | d).to_bytes(3, "little")


def test_date_and_invalid_dates() -> None:
    assert one(Col(T.DATE), _date(2024, 2, 29)) == datetime.date(2024, 2, 29)
    assert one(Col(T.DATE), _date(0, 0, 0)) == values.InvalidTemporal("0000-00-00")
    assert one(Col(T.DATE), _date(2024, 0, 10)) == values.InvalidTemporal("2024-00-10")
    assert one(Col(T.DATE), _date(2024, 2, 30)) == values.InvalidTemporal("2024-02-30")


def _dt2(y: int, mo: int, d: int, h: int, mi: int, s: int, frac: bytes = b"") -> bytes:
    ymd = ((y * 13 + mo) << 5) | d
    hms = (h << 12) | (mi << 6) | s
    return (((ymd << 17) | hms) + 0x8000000000).to_bytes(5, "big") + frac


def test_datetime2_all_fsp() -> None:
    assert one(Col(T.DATETIME2, b"\x00"), _dt2(9999, 12, 31, 23, 59, 59)) == datetime.datetime(
        9999, 12, 31, 23, 59, 59)
    assert one(Col(T.DATETIME2, b"\x01"), _dt2(2024, 2, 29, 1, 2, 3, b"\x05")) == \
        datetime.datetime(2024, 2, 29, 1, 2, 3, 50000)
    assert one(Col(T.DATETIME2, b"\x03"), _dt2(2024, 2, 29, 1, 2, 3, (789 * 10).to_bytes(2, "big"))) \
        == datetime.datetime(2024, 2, 29, 1, 2, 3, 789000)
    assert one(Col(T.DATETIME2, b"\x06"), _dt2(1000, 1, 1, 0, 0, 0, (1).to_bytes(3, "big"))) == \
        datetime.datetime(1000, 1, 1, 0, 0, 0, 1)
    assert one(Col(T.DATETIME2, b"\x03"), _dt2(0, 0, 0, 0, 0, 0, b"\0\0")) == \
        values.InvalidTemporal("0000-00-00 00:00:00.000")


@settings(max_examples=200, deadline=None)
@given(fsp=st.integers(0, 6), year=st.integers(0, 9999), month=st.integers(0, 12),
       day=st.integers(0, 31), hour=st.integers(0, 23), minute=st.integers(0, 59),
       second=st.integers(0, 59), frac=st.integers(0, 999999))
def test_datetime2_inline_decoder_matches_the_reference(fsp: int, year: int, month: int,
                                                        day: int, hour: int, minute: int,
                                                        second: int, frac: int) -> None:
    """The generated DATETIME2 code equals ``values.decode_datetime2`` for every fsp, valid
    and invalid dates (zero dates, 2024-02-30) alike."""
    nbytes = values.fractional_size(fsp)
    stored_frac = {0: 0, 1: frac // 10000, 2: frac // 10000, 3: frac // 100, 4: frac // 100,
                   5: frac, 6: frac}[fsp]
    stored = _dt2(year, month, day, hour, minute, second,
                  stored_frac.to_bytes(nbytes, "big") if nbytes else b"")
    value = one(Col(T.DATETIME2, bytes([fsp])), stored)
    assert value == values.decode_datetime2(stored, 0, fsp)
    assert type(value) is type(values.decode_datetime2(stored, 0, fsp))


@settings(max_examples=200, deadline=None)
@given(fsp=st.integers(0, 6), seconds=st.integers(0, 2**32 - 1) | st.just(0),
       frac=st.integers(0, 999999) | st.just(0))
def test_timestamp2_inline_decoder_matches_the_reference(fsp: int, seconds: int,
                                                         frac: int) -> None:
    nbytes = values.fractional_size(fsp)
    stored_frac = {0: 0, 1: frac // 10000, 2: frac // 10000, 3: frac // 100, 4: frac // 100,
                   5: frac, 6: frac}[fsp]
    stored = seconds.to_bytes(4, "big") + stored_frac.to_bytes(nbytes, "big")
    value = one(Col(T.TIMESTAMP2, bytes([fsp])), stored)
    reference = values.decode_timestamp2(stored, 0, fsp)
    assert value == reference and type(value) is type(reference)
    if isinstance(value, datetime.datetime):
        assert value.tzinfo is UTC and repr(value) == repr(reference)


def test_datetime2_impossible_fraction_is_an_error() -> None:
    table = tm([Col(T.DATETIME2, b"\x02")])
    with pytest.raises(RowDecodeError):  # 0xFF hundredths: 2.55 s
        decode(table, rows_body(1, [image([_dt2(2024, 1, 1, 0, 0, 0, b"\xff")])]))


def test_timestamp2_and_old_forms() -> None:
    stored = (2**31 - 1).to_bytes(4, "big") + (999999).to_bytes(3, "big")
    assert one(Col(T.TIMESTAMP2, b"\x06"), stored) == datetime.datetime(
        2038, 1, 19, 3, 14, 7, 999999, tzinfo=UTC)
    assert one(Col(T.TIMESTAMP2, b"\x00"), b"\0\0\0\0") == values.InvalidTemporal(
        "0000-00-00 00:00:00")
    assert one(Col(T.TIMESTAMP), i32(1)) == datetime.datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)
    assert one(Col(T.DATETIME), (20240229123456).to_bytes(8, "little")) == datetime.datetime(
        2024, 2, 29, 12, 34, 56)
    assert one(Col(T.TIME), (-8385959).to_bytes(3, "little", signed=True)) == -datetime.timedelta(
        hours=838, minutes=59, seconds=59)
    assert one(Col(T.NEWDATE), _date(1, 1, 1)) == datetime.date(1, 1, 1)


def _time2(td: datetime.timedelta, fsp: int) -> bytes:
    """Independent TIME2 encoder following the server's packed form."""
    total = td.days * 86400_000000 + td.seconds * 1000000 + td.microseconds
    neg = total < 0
    total = abs(total)
    seconds, us = divmod(total, 1000000)
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    packed = (((h << 12) | (m << 6) | s) << 24) + us
    if neg:
        packed = -packed
    intpart = packed >> 24  # arithmetic shift, as in C
    frac = (abs(packed) % (1 << 24)) * (-1 if packed < 0 else 1)  # C's % keeps the sign
    if fsp == 0:
        return (intpart + 0x800000).to_bytes(3, "big")
    if fsp <= 2:
        f = int(frac / 10000)
        return (intpart + 0x800000).to_bytes(3, "big") + (f & 0xFF).to_bytes(1, "big")
    if fsp <= 4:
        f = int(frac / 100)
        return (intpart + 0x800000).to_bytes(3, "big") + (f & 0xFFFF).to_bytes(2, "big")
    return (packed + 0x800000000000).to_bytes(6, "big")


@pytest.mark.parametrize("fsp", [0, 1, 2, 3, 4, 5, 6])
@pytest.mark.parametrize("text", [
    "838:59:59", "-838:59:59", "00:00:00", "-00:00:01", "12:34:56", "-12:34:56.5",
    "-00:00:00.1", "-01:00:00.01", "838:59:59.99", "-00:00:00.000001",
])
def test_time2(fsp: int, text: str) -> None:
    neg = text.startswith("-")
    hms, _, frac = text.lstrip("-").partition(".")
    h, m, s = (int(x) for x in hms.split(":"))
    us = int(frac.ljust(6, "0")[:fsp].ljust(6, "0")) if frac else 0
    td = datetime.timedelta(hours=h, minutes=m, seconds=s, microseconds=us)
    td = -td if neg else td
    # negative values with fsp 1-4 are stored with a borrowed fraction, built as the server does
    assert one(Col(T.TIME2, bytes([fsp])), _time2(td, fsp)) == td


def test_strings_and_charsets() -> None:
    utf8 = Col(T.VARCHAR, u16(400), charset=45)
    assert one(utf8, u16(6) + "😀é".encode(), character=[0]) == "😀é"
    latin1 = Col(T.VARCHAR, u16(20), charset=8)
    assert one(latin1, b"\x03\x80\x81\xe9", character=[0]) == "€\x81é"
    binary = Col(T.VARCHAR, u16(20), charset=63)
    assert one(binary, b"\x02\x00\xff", character=[0]) == b"\x00\xff"
    nocharset = Col(T.VARCHAR, u16(20))
    assert one(nocharset, b"\x02ab", names=False) == b"ab"  # no charset metadata: bytes
    invalid = Col(T.VARCHAR, u16(20), charset=45)
    assert one(invalid, b"\x02\xff\xfe", character=[0]) == b"\xff\xfe"  # not UTF-8: bytes
    wide = Col(T.VARCHAR, u16(1000), charset=45)
    assert one(wide, u16(3) + b"abc", character=[0]) == "abc"


def test_char_metadata_packs_long_lengths() -> None:
    # CHAR(255) utf8mb4 = 1020 bytes: bits 8-9 of the length live in the type byte
    real, length = resolve_string_meta(((T.STRING ^ ((1020 & 0x300) >> 4)) << 8) | (1020 & 0xFF))
    assert (real, length) == (T.STRING, 1020)
    meta = bytes([T.STRING ^ ((1020 & 0x300) >> 4), 1020 & 0xFF])
    col = Col(T.STRING, meta, charset=45)
    assert one(col, u16(4) + b"abcd", character=[0]) == "abcd"


def test_binary_n_is_padded_back() -> None:
    col = Col(T.STRING, bytes([T.STRING, 4]), charset=63)
    assert one(col, b"\x02ab", character=[0]) == b"ab\0\0"


def test_blobs_text_json_geometry() -> None:
    assert one(Col(T.BLOB, b"\x02", charset=63), u16(3) + b"\0\1\0", character=[0]) == b"\0\1\0"
    assert one(Col(T.BLOB, b"\x04", charset=45), i32(2) + b"hi", character=[0]) == "hi"
    assert one(Col(T.BLOB, b"\x01", charset=63), b"\x00", character=[0]) == b""
    assert one(Col(T.GEOMETRY, b"\x04"), i32(5) + b"\0\0\0\0\1") == b"\0\0\0\0\1"
    doc = jsonb({"b": [True, None], "a": 1})
    assert one(Col(T.JSON, b"\x04"), i32(len(doc)) + doc) == '{"a": 1, "b": [true, null]}'
    assert one(Col(T.JSON, b"\x04"), i32(0)) == "null"


def test_enum_and_set() -> None:
    e = Col(T.STRING, bytes([T.ENUM, 1]), labels=("a", "b", "ç"))
    s = Col(T.STRING, bytes([T.SET, 1]), labels=("x", "y", "z"))
    table = tm([e, s], enums=[0], sets=[1])
    assert table.columns[0].type_code == T.ENUM and table.columns[1].type_code == T.SET
    ev = decode(table, rows_body(2, [image([b"\x03", b"\x05"]), image([b"\x00", b"\x00"])]))
    assert ev.after == (["ç", ""], ["x,z", ""])
    # no label metadata: the numbers, as documented
    bare = tm([e, s], names=False)
    ev = decode(bare, rows_body(2, [image([b"\x02", b"\x06"])]))
    assert ev.after == ([2], [6])
    with pytest.raises(RowDecodeError):  # an index with no label
        decode(table, rows_body(2, [image([b"\x09", b"\x00"])]))


def test_json_binary_formatting() -> None:
    assert values.json_binary_to_text(jsonb([1.5, 1e100, -0.1, 2.0, 1e-7, 1e-16, 123456789012.0])) == \
        "[1.5, 1e100, -0.1, 2.0, 0.0000001, 1e-16, 123456789012.0]"
    assert values.json_binary_to_text(jsonb({"long": "x\n\"", "s": "é", "": []})) == \
        '{"": [], "s": "é", "long": "x\\n\\""}'
    assert values.json_binary_to_text(jsonb([2**63, -2**40, 70000, True, False])) == \
        "[9223372036854775808, -1099511627776, 70000, true, false]"


# --- images, kinds, table maps -----------------------------------------------------------------


def three_cols() -> TableMapEvent:
    return tm([Col(T.LONG, nullable=False, name="id"), Col(T.VARCHAR, u16(10), name="v",
                                                           charset=45),
               Col(T.LONGLONG, name="n")], numeric=[0, 2], character=[1], pk=[0])


# Columns for the NULL-mix property test: (Col, numeric?, encode, value strategy).
_MIX = [
    (Col(T.TINY, unsigned=True), True, lambda v: bytes([v]), st.integers(0, 255)),
    (Col(T.SHORT), True, lambda v: struct.pack("<h", v), st.integers(-2**15, 2**15 - 1)),
    (Col(T.LONG, unsigned=True), True, lambda v: struct.pack("<I", v), st.integers(0, 2**32 - 1)),
    (Col(T.LONGLONG), True, lambda v: struct.pack("<q", v), st.integers(-2**63, 2**63 - 1)),
    (Col(T.DOUBLE, b"\x08"), True, lambda v: struct.pack("<d", v),
     st.floats(allow_nan=False)),
    (Col(T.VARCHAR, u16(40), charset=45), False,
     lambda v: bytes([len(v.encode())]) + v.encode(), st.text(max_size=10)),
    (Col(T.FLOAT, b"\x04"), True, lambda v: struct.pack("<f", v),
     st.floats(width=32, allow_nan=False)),
    (Col(T.INT24), True, lambda v: v.to_bytes(3, "little", signed=True),
     st.integers(-2**23, 2**23 - 1)),
    (Col(T.LONG), True, lambda v: struct.pack("<i", v), st.integers(-2**31, 2**31 - 1)),
]


@functools.cache
def _mix_table() -> TableMapEvent:
    numeric = [k for k, (_, is_num, _, _) in enumerate(_MIX) if is_num]
    return tm([c for c, _, _, _ in _MIX], numeric=numeric, character=[5])


_MIX_ROW = st.tuples(*[st.none() | strategy for _, _, _, strategy in _MIX])


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(_MIX_ROW, _MIX_ROW), min_size=1, max_size=6))
def test_rows_with_and_without_nulls_decode_alike(pairs: list[tuple[Any, Any]]) -> None:
    """Rows with no NULL take generated code without null tests, where runs of fixed-width
    numbers are one struct read; rows with NULLs take the general code. Both, mixed in one
    event and in both images of an UPDATE, give the values that were written."""
    table = _mix_table()
    cols = table.columns
    n_rows = len(pairs)
    rows = [row for pair in pairs for row in pair]
    images = [image([None if v is None else enc(v) for v, (_, _, enc, _) in zip(row, _MIX, strict=True)])
              for row in rows]
    ev = decode(table, rows_body(len(cols), images, present2=range(len(cols))),
                RowsKind.UPDATE)
    assert ev.row_count == n_rows
    assert [list(col) for col in ev.before] == [list(c) for c in zip(*rows[0::2], strict=True)]
    assert [list(col) for col in ev.after] == [list(c) for c in zip(*rows[1::2], strict=True)]


def test_table_map_fields() -> None:
    table = three_cols()
    assert (table.table_id, table.schema, table.table) == (42, "db", "t")
    assert [c.name for c in table.columns] == ["id", "v", "n"]
    assert table.primary_key == (0,) and table.has_full_metadata
    assert not table.columns[0].nullable and table.columns[1].nullable
    assert table.columns[1].charset == 45 and table.columns[1].length == 10


def test_table_map_unknown_tlv_skipped_and_4_byte_ids() -> None:
    body = table_map_body([Col(T.LONG, name="x")], extra_tlvs=b"\x63\x02ab")
    assert decode_table_map(header(), body, 8).columns[0].name == "x"
    short = body[:4] + body[6:]  # 4-byte table id
    table = decode_table_map(header(), short, 6)
    assert table.table_id == 42 and table.columns[0].name == "x"


def test_table_map_truncated_is_typed() -> None:
    body = table_map_body([Col(T.LONG, name="x"), Col(T.VARCHAR, u16(3), name="y")],
                          numeric=[0])
    for cut in range(len(body)):
        try:
            decode_table_map(header(), body[:cut], 8)
        except EventDecodeError:
            pass


def test_insert_update_delete_and_v2_extra() -> None:
    table = three_cols()
    rows = [image([i32(1), b"\x01a", None]), image([i32(2), b"\x00", struct.pack("<q", -5)])]
    ins = decode(table, rows_body(3, rows))
    assert ins.kind is RowsKind.INSERT and ins.before is None
    assert ins.rows_after() == [{"id": 1, "v": "a", "n": None}, {"id": 2, "v": "", "n": -5}]
    upd = decode(table, rows_body(3, [rows[0], rows[1]], present2=range(3), version=2,
                                  extra=b"\x01\x02\x00"), kind=RowsKind.UPDATE, version=2)
    assert upd.extra == b"\x01\x02\x00"
    assert upd.rows_before() == [{"id": 1, "v": "a", "n": None}]
    assert upd.rows_after() == [{"id": 2, "v": "", "n": -5}]
    dele = decode(table, rows_body(3, [rows[0]]), kind=RowsKind.DELETE)
    assert dele.after is None and dele.before_columns == (0, 1, 2)


def test_minimal_image_absent_is_not_null() -> None:
    table = three_cols()
    body = rows_body(3, [image([i32(7)]), image([None])], present=[0], present2=[2])
    ev = decode(table, body, kind=RowsKind.UPDATE)
    assert ev.before_columns == (0,) and ev.after_columns == (2,)
    assert ev.rows_after() == [{"n": None}]


def test_unknown_flags_tolerated_and_unknown_table() -> None:
    table = three_cols()
    ev = decode(table, rows_body(3, [image([i32(1), b"\x00", None])], flags=0xFFFF))
    assert ev.flags == 0xFFFF
    with pytest.raises(UnknownTable):
        decode_rows_event(header(23), rows_body(3, []), 8, {}, version=1, kind=RowsKind.INSERT)


def test_width_mismatch() -> None:
    with pytest.raises(RowDecodeError):
        decode(three_cols(), rows_body(2, [image([i32(1), b"\x00"])]))


def test_decoder_cached_per_table_map() -> None:
    table = three_cols()
    decoders = DecoderCache()
    decode_rows_event(header(23), memoryview(rows_body(3, [image([i32(1), b"\x00", None])])), 8,
                      {table.table_id: table}, version=1, kind=RowsKind.INSERT,
                      decoders=decoders)
    dec = decoders.decoder_for(table)
    assert decoders.built == 1  # the decode built it, decoder_for found it
    assert "def _decode" in dec.source_for(None, (0, 1, 2))


# --- PARTIAL_UPDATE_ROWS -----------------------------------------------------------------------


def _diff(ops: list[tuple[int, str, Any]]) -> bytes:
    out = b""
    for op, path, value in ops:
        out += bytes([op]) + lenenc_str(path.encode())
        if op != 2:
            out += lenenc_str(jsonb(value))
    return i32(len(out)) + out


def test_partial_update_applies_diff_to_full_before_image() -> None:
    table = tm([Col(T.LONG, name="id"), Col(T.JSON, b"\x04", name="j")], numeric=[0])
    before_doc = jsonb({"a": 1, "b": [1, 2]})
    diff = _diff([(0, "$.a", "x"), (1, "$.b[1]", 9), (1, '$."new key"', None), (2, "$.b[0]", None)])
    body = rows_body(2, [
        image([i32(1), i32(len(before_doc)) + before_doc]) + lenenc(1) + b"\x01"
        + image([i32(1), diff]),
    ], present2=[0, 1], version=2)
    ev = decode(table, body, kind=RowsKind.UPDATE, version=2, partial=True)
    assert ev.kind is RowsKind.UPDATE
    assert ev.after[1] == ['{"a": "x", "b": [9, 2], "new key": null}']


def test_partial_update_without_before_value_surfaces_the_diff() -> None:
    table = tm([Col(T.LONG, name="id"), Col(T.JSON, b"\x04", name="j")], numeric=[0])
    diff = _diff([(0, "$.a", 5), (2, "$.c", None)])
    body = rows_body(2, [image([i32(1)]) + lenenc(1) + b"\x01" + image([diff])],
                     present=[0], present2=[1], version=2)
    ev = decode(table, body, kind=RowsKind.UPDATE, version=2, partial=True)
    assert ev.after[0] == [values.JsonDiff(((0, "$.a", "5"), (2, "$.c", None)))]
    # value_options without the partial bit: a plain after image
    doc = jsonb([1])
    body = rows_body(2, [image([i32(1)]) + lenenc(0) + image([i32(len(doc)) + doc])],
                     present=[0], present2=[1], version=2)
    assert decode(table, body, kind=RowsKind.UPDATE, version=2, partial=True).after[0] == ["[1]"]


# --- corrupted input -----------------------------------------------------------------------------


def _matrix_table() -> tuple[TableMapEvent, bytes]:
    cols = [
        Col(T.LONG, name="id"), Col(T.NEWDECIMAL, bytes([12, 2]), name="d"),
        Col(T.DATETIME2, b"\x06", name="dt"), Col(T.VARCHAR, u16(64), name="v", charset=45),
        Col(T.TIME2, b"\x03", name="t"), Col(T.BLOB, b"\x02", name="b", charset=63),
        Col(T.STRING, bytes([T.ENUM, 1]), name="e", labels=("p", "q")),
        Col(T.JSON, b"\x04", name="j"), Col(T.BIT, b"\x01\x01", name="bt"),
        Col(T.DATE, name="da"),
    ]
    table = tm(cols, numeric=[0, 1], character=[3, 5], enums=[6])
    doc = jsonb({"k": [1, "two"]})
    row = image([i32(1), _decimal_bytes("-1234567890.12", 12, 2),
                 _dt2(2024, 2, 29, 1, 2, 3, b"\x00\x00\x01"), b"\x03abc",
                 _time2(datetime.timedelta(hours=-1), 3), u16(2) + b"\0\1", b"\x02",
                 i32(len(doc)) + doc, b"\x01\xff", _date(2024, 1, 1)])
    return table, rows_body(10, [row, row])


def test_truncation_gives_typed_errors() -> None:
    table, body = _matrix_table()
    ok = decode(table, body)
    assert ok.row_count == 2
    for cut in range(len(body)):
        try:
            ev = decode(table, body[:cut])
        except RowDecodeError:
            continue
        # a cut at a row boundary is a shorter, valid event
        assert ev.row_count < 2, cut


def test_fuzz_bit_flips_give_typed_errors_or_values() -> None:
    iterations = int(os.environ.get("BINLAKE_FUZZ_ITERATIONS", "300"))
    table, body = _matrix_table()
    rng = random.Random(5)
    for _ in range(iterations):
        data = bytearray(body)
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        if rng.random() < 0.3:
            data = data[:rng.randrange(len(data))]
        try:
            decode(table, bytes(data))
        except (RowDecodeError, UnknownTable):
            pass


def test_collation_codecs() -> None:
    assert codec_for_collation(45) == "utf-8" and codec_for_collation(255) == "utf-8"
    assert codec_for_collation(8) == "mysql-latin1" and codec_for_collation(63) is None
    assert codec_for_collation(None) is None and codec_for_collation(4000) is None
    assert codec_for_collation(2304) == "utf-8"  # MariaDB 11 utf8mb4_uca1400_ai_ci


def test_mariadb_fixed_binary_helpers() -> None:
    assert values.mariadb_uuid_text(bytes.fromhex("123e4567e89b12d3a456426655440000")) == \
        "123e4567-e89b-12d3-a456-426655440000"
    assert values.inet4_text(b"\xff\0\0\1") == "255.0.0.1"
    assert values.inet6_text(bytes.fromhex("fe800000000000000000000000010002")) == "fe80::1:2"


# --- a small binary JSON encoder for the tests ---------------------------------------------------


def jsonb(value: Any) -> bytes:
    t, data = _jsonb(value)
    return bytes([t]) + data


def _jsonb(value: Any) -> tuple[int, bytes]:
    if value is None:
        return 4, b"\x00"
    if value is True:
        return 4, b"\x01"
    if value is False:
        return 4, b"\x02"
    if isinstance(value, int):
        if -2**15 <= value < 2**15:
            return 5, struct.pack("<h", value)
        if 0 <= value < 2**64 and value >= 2**63:
            return 0xA, struct.pack("<Q", value)
        return 9, struct.pack("<q", value)
    if isinstance(value, float):
        return 0xB, struct.pack("<d", value)
    if isinstance(value, str):
        raw = value.encode()
        n = len(raw)
        var = b""
        while True:
            b = n & 0x7F
            n >>= 7
            var += bytes([b | (0x80 if n else 0)])
            if not n:
                break
        return 0xC, var + raw
    is_obj = isinstance(value, dict)
    items = sorted(value.items(), key=lambda kv: (len(kv[0].encode()), kv[0].encode())) \
        if is_obj else list(enumerate(value))
    count = len(items)
    header_len = 4 + (4 * count if is_obj else 0) + 3 * count
    keys = b"".join(k.encode() for k, _ in items) if is_obj else b""
    key_entries = b""
    pos = header_len
    if is_obj:
        for k, _ in items:
            key_entries += u16(pos) + u16(len(k.encode()))
            pos += len(k.encode())
    value_entries = b""
    payload = b""
    for _, v in items:
        t, data = _jsonb(v)
        if t == 4 or t == 5:
            value_entries += bytes([t]) + (data + b"\0")[:2]
        else:
            value_entries += bytes([t]) + u16(pos + len(payload))
            payload += data
    total = header_len + len(keys) + len(payload)
    return (0 if is_obj else 2), u16(count) + u16(total) + key_entries + value_entries + keys \
        + payload


# --- speed -------------------------------------------------------------------------------------


def bench_rows(n_rows: int = 200_000, clock: Any = time.perf_counter) -> float:
    """Rows/s decoding INSERTs of an 8-column table (INT PK, BIGINT, VARCHAR(64), DECIMAL(12,2),
    DATETIME(6), DOUBLE, TEXT, ENUM), 1000 rows per event. ``clock=time.process_time`` measures
    CPU time, which other processes on a shared machine disturb far less than wall time."""
    cols = [
        Col(T.LONG, nullable=False, name="id"), Col(T.LONGLONG, name="big"),
        Col(T.VARCHAR, u16(256), name="v", charset=45),
        Col(T.NEWDECIMAL, bytes([12, 2]), name="d"), Col(T.DATETIME2, b"\x06", name="dt"),
        Col(T.DOUBLE, b"\x08", name="f"), Col(T.BLOB, b"\x02", name="tx", charset=45),
        Col(T.STRING, bytes([T.ENUM, 1]), name="e", labels=("new", "paid", "shipped")),
    ]
    table = tm(cols, numeric=[0, 1, 3, 5], character=[2, 6], enums=[7])
    per_event = 1000
    rows = []
    text = b"lorem ipsum dolor sit amet, consectetur"
    for i in range(per_event):
        rows.append(image([
            i32(i), struct.pack("<q", i * 1000003), u16(20) + f"customer-{i:011d}".encode(),
            _decimal_bytes(f"{i}.{i % 100:02d}", 12, 2),
            _dt2(2024, 5, 17, 12, 30, i % 60, (i * 7).to_bytes(3, "big")),
            struct.pack("<d", i / 3), u16(len(text)) + text,
            bytes([1 + i % 3]),
        ]))
    body = rows_body(8, rows)
    events = n_rows // per_event
    start = clock()
    for _ in range(events):
        decode(table, body)
    return events * per_event / (clock() - start)


def test_speed_smoke() -> None:
    assert bench_rows(20_000) > 10_000  # a floor for a shared 2-core machine, not the target


if __name__ == "__main__":  # python -m tests.unit.test_rows
    wall = max(bench_rows() for _ in range(3))
    cpu = max(bench_rows(clock=time.process_time) for _ in range(3))
    print(f"{wall:,.0f} rows/s wall, {cpu:,.0f} rows/s CPU time (best of 3)")


def test_fuzz_table_map_gives_typed_errors() -> None:
    iterations = int(os.environ.get("BINLAKE_FUZZ_ITERATIONS", "300"))
    cols = [Col(T.LONG, name="id"), Col(T.VARCHAR, u16(10), name="v", charset=45),
            Col(T.STRING, bytes([T.SET, 1]), name="s", labels=("a", "b")),
            Col(T.NEWDECIMAL, bytes([10, 2]), name="d")]
    body = table_map_body(cols, numeric=[0, 3], character=[1], sets=[2], pk=[0])
    rng = random.Random(7)
    for _ in range(iterations):
        data = bytearray(body)
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        if rng.random() < 0.3:
            data = data[:rng.randrange(len(data))]
        try:
            table = decode_table_map(header(), bytes(data), 8)
        except EventDecodeError:
            continue
        try:  # whatever the map says, rows against it fail typed or decode
            decode(table, rows_body(len(table.columns), [b"\x00" * 8]))
        except (RowDecodeError, UnknownTable):
            pass


# --- CRC32 over recorded row events ---------------------------------------------------------------

_FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "binlogs"
# WRITE/UPDATE/DELETE_ROWS v1 and v2, MariaDB's compressed forms, MySQL's TRANSACTION_PAYLOAD.
_ROW_CARRYING = {23, 24, 25, 30, 31, 32, 166, 167, 168, 169, 170, 171, 40}


def _recorded_row_events() -> list[tuple[Path, int, bytes]]:
    out = []
    for path in sorted(_FIXTURES.glob("*/mysql-bin.0*")):
        out += [(path, offset, raw) for offset, raw in split_binlog(path.read_bytes())
                if raw[4] in _ROW_CARRYING]
    return out


def _feed_file(path: Path, data: bytes, verify: bool = True) -> list[Any]:
    stream = EventStream(file=path.name, verify_checksums=verify)
    return [event for _, raw in split_binlog(data) for event in stream.feed(raw)]


@pytest.mark.parametrize("flavor", ["mariadb-10.11", "mariadb-11.8", "mysql-9.7"])
def test_corrupted_row_byte_in_a_recorded_binlog_is_caught_by_crc(flavor: str) -> None:
    """A flipped byte anywhere in a row-carrying event of a real server's binlog (row values,
    compressed payloads) stops decoding with ChecksumMismatch naming the file and the event's
    position — it must never turn into a silently different value."""
    targets = [t for t in _recorded_row_events() if t[0].parent.name == flavor]
    assert targets
    rng = random.Random(11)
    for path, offset, raw in targets:
        data = bytearray(path.read_bytes())
        where = offset + 19 + rng.randrange(len(raw) - 19 - 4)  # body, not the CRC itself
        data[where] ^= 1 << rng.randrange(8)
        with pytest.raises(ChecksumMismatch) as info:
            _feed_file(path, bytes(data))
        assert (info.value.file, info.value.position) == (path.name, offset)
        assert path.name in str(info.value) and str(offset) in str(info.value)


def test_without_crc_a_flipped_value_byte_decodes_silently() -> None:
    """Why the check matters: the last byte of a row value flipped, CRC off, decodes quietly to
    a different value (the MariaDB 10.11 fixture's first WRITE_ROWS)."""
    path, offset, raw = next(t for t in _recorded_row_events()
                             if t[0].parent.name == "mariadb-10.11" and t[2][4] == 23)
    clean = [e for e in _feed_file(path, path.read_bytes()) if e.header.position == offset]
    data = bytearray(path.read_bytes())
    data[offset + len(raw) - 5] ^= 0x01  # the last byte before the CRC: inside the last value
    dirty = [e for e in _feed_file(path, bytes(data), verify=False)
             if e.header.position == offset]
    assert clean[0].rows_after() != dirty[0].rows_after()
    with pytest.raises(ChecksumMismatch):
        _feed_file(path, bytes(data))


@pytest.mark.parametrize("mariadb", [True, False])
def test_mariadb_gives_year_a_signedness_bit(mariadb: bool) -> None:
    """(YEAR, DECIMAL, INT UNSIGNED): MariaDB's SIGNEDNESS bitmap has a bit for the YEAR (set:
    Field_year is an unsigned Field_tiny), MySQL's has none. Reading it MySQL's way on MariaDB
    shifted the bits: the DECIMAL came out unsigned and the INT UNSIGNED signed."""
    cols = [Col(T.YEAR, name="y", unsigned=True), Col(T.NEWDECIMAL, b"\x05\x02", name="d"),
            Col(T.LONG, name="u", unsigned=True)]
    body = table_map_body(cols, numeric=[0, 1, 2] if mariadb else [1, 2])
    table = decode_table_map(header(), body, 8, mariadb=mariadb)
    assert [c.unsigned for c in table.columns] == [False, False, True]
