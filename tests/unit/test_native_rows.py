"""The native row decoder against the Python reference (server-free): random rows of every type
it covers, then truncated and bit-flipped events — the same values, the same typed errors, and
never a crash. Skipped when the extension is not built, except under CI=true (scripts/test.sh
installs the project, which builds it: not built there is a failure)."""

from __future__ import annotations

import datetime
import math
import os
import random
import struct
import time
from collections.abc import Callable
from decimal import Decimal
from typing import Any
from unittest import mock

import pytest

from protocol.binlog import native, values
from protocol.binlog.coltypes import CHARACTER_TYPES, NUMERIC_TYPES
from protocol.binlog.coltypes import FieldType as T
from protocol.binlog.model import RowsEvent, RowsKind, TableMapEvent
from protocol.binlog.rows import DecoderCache, decode_rows_event
from protocol.binlog.tablemap import decode_table_map
from protocol.errors import EventDecodeError
from tests.unit.rowbuild import Col, header, image, rows_body, table_map_body, u16
from tests.unit.test_rows import jsonb

if not native.AVAILABLE:
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true but {native.UNAVAILABLE_REASON}", pytrace=False)
    pytest.skip(native.UNAVAILABLE_REASON, allow_module_level=True)

ROUNDS = int(os.environ.get("BINLAKE_NATIVE_FUZZ_ROUNDS", "300"))

Enc = Callable[[random.Random], bytes]


def _int(size: int, unsigned: bool) -> Enc:
    def enc(rng: random.Random) -> bytes:
        if unsigned:
            v = rng.choice([0, 1, (1 << size * 8) - 1, rng.randrange(1 << size * 8)])
        else:
            v = rng.choice([0, -1, -(1 << size * 8 - 1), (1 << size * 8 - 1) - 1,
                            rng.randrange(-(1 << size * 8 - 1), 1 << size * 8 - 1)])
        return v.to_bytes(size, "little", signed=not unsigned)
    return enc


def _prefixed(width: int, maxlen: int, alphabet: list[bytes]) -> Enc:
    def enc(rng: random.Random) -> bytes:
        data = b"".join(rng.choice(alphabet) for _ in range(rng.randrange(maxlen // 4 + 1)))
        data = data[:maxlen]
        return len(data).to_bytes(width, "little") + data
    return enc


_TEXT = [b"a", b"Z", b" ", "é".encode(), "😀".encode(), b"\xff", b"\x80", b"\x00"]


def _date(rng: random.Random) -> bytes:
    y, m, d = rng.choice([(rng.randrange(1, 10000), rng.randrange(1, 13), rng.randrange(1, 29)),
                          (0, 0, 0), (2024, 2, 30), (rng.randrange(16384), rng.randrange(16),
                                                     rng.randrange(32))])
    return (y << 9 | m << 5 | d).to_bytes(3, "little")


def _dt2(fsp: int) -> Enc:
    def enc(rng: random.Random) -> bytes:
        y, mo, d = rng.randrange(10000), rng.randrange(13), rng.randrange(32)
        h, mi, s = rng.randrange(24), rng.randrange(60), rng.randrange(60)
        if rng.random() < 0.1:
            y, mo, d, h, mi, s = 0, 0, 0, 0, 0, 0
        packed = (((y * 13 + mo) << 5 | d) << 17 | h << 12 | mi << 6 | s) + (1 << 39)
        return packed.to_bytes(5, "big") + _frac(rng, fsp)
    return enc


def _frac(rng: random.Random, fsp: int) -> bytes:
    us = rng.randrange(1000000) // 10 ** (6 - fsp) * 10 ** (6 - fsp)
    if fsp <= 2:
        return (us // 10000).to_bytes(1, "big") if fsp else b""
    if fsp <= 4:
        return (us // 100).to_bytes(2, "big")
    return us.to_bytes(3, "big")


def _ts2(fsp: int) -> Enc:
    def enc(rng: random.Random) -> bytes:
        seconds = rng.choice([0, 1, 2**31 - 1, 2**32 - 1, rng.randrange(2**32)])
        return seconds.to_bytes(4, "big") + (b"\0" * ((fsp + 1) // 2) if seconds == 0
                                              else _frac(rng, fsp))
    return enc


def _decimal(precision: int, scale: int) -> Enc:
    def enc(rng: random.Random) -> bytes:
        digits = "".join(rng.choice("0123456789") for _ in range(precision))
        text = digits[:precision - scale] + "." + digits[precision - scale:]
        value = Decimal(("-" if rng.random() < 0.5 else "") + text)
        return _encode_decimal(value, precision, scale)
    return enc


def _encode_decimal(value: Decimal, precision: int, scale: int) -> bytes:
    """DECIMAL's stored form (the inverse of values.decode_decimal)."""
    sign, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)
    text = "".join(map(str, digits)).rjust(precision, "0")
    assert -exponent == scale
    out = b""
    pos = 0
    for nbytes, ndigits in values.decimal_groups(precision, scale):
        out += int(text[pos:pos + ndigits] or "0").to_bytes(nbytes, "big")
        pos += ndigits
    raw = bytearray(out)
    raw[0] ^= 0x80
    if sign:
        raw = bytearray(b ^ 0xFF for b in raw)
    return bytes(raw)


def _bit(bits: int) -> Enc:
    nbytes = bits // 8 + (1 if bits % 8 else 0)
    return lambda rng: rng.randrange(1 << bits).to_bytes(nbytes, "big")


def _time2(fsp: int) -> Enc:
    """A TIME2 as a server writes it (a negative value's fraction borrowing from its seconds)."""
    def enc(rng: random.Random) -> bytes:
        neg = rng.random() < 0.5
        hms = rng.randrange(839) << 12 | rng.randrange(60) << 6 | rng.randrange(1, 60)
        if fsp >= 5:
            packed = (hms << 24) + rng.randrange(1000000) // 10 ** (6 - fsp) * 10 ** (6 - fsp)
            return ((-packed if neg else packed) + 0x800000000000).to_bytes(6, "big")
        size = (fsp + 1) // 2
        scale = 100 ** size
        frac = rng.randrange(scale) if fsp else 0
        if neg and frac:
            return (0x800000 - hms).to_bytes(3, "big") + (256 ** size - frac).to_bytes(size, "big")
        return (0x800000 + (-hms if neg else hms)).to_bytes(3, "big") + \
            frac.to_bytes(size, "big")[:size]
    return enc


def _json(rng: random.Random) -> bytes:
    value = rng.choice([None, True, 7, -2**40, 2**63 + 5, 1.5e300, "é😀", [], {},
                        {"k": [1, "x", None], "a": {"b": False}}, [[1.25], {"z": ""}]])
    data = jsonb(value)
    return len(data).to_bytes(4, "little") + data


def _pick(options: list[bytes]) -> Enc:
    return lambda rng: rng.choice(options)


# (column, encoder of one random stored value)
COLUMNS: list[tuple[Col, Enc]] = [
    *[(Col(t, unsigned=u), _int(size, u))
      for t, size in ((T.TINY, 1), (T.SHORT, 2), (T.INT24, 3), (T.LONG, 4), (T.LONGLONG, 8))
      for u in (False, True)],
    (Col(T.FLOAT, b"\x04"), lambda rng: struct.pack("<f", rng.uniform(-1e6, 1e6))),
    (Col(T.DOUBLE, b"\x08"), lambda rng: struct.pack("<d", rng.uniform(-1e300, 1e300))),
    (Col(T.VARCHAR, u16(80), charset=45), _prefixed(1, 80, _TEXT)),
    (Col(T.VARCHAR, u16(1000), charset=45), _prefixed(2, 1000, _TEXT)),
    (Col(T.VARCHAR, u16(20), charset=8), _prefixed(1, 20, _TEXT)),  # latin1: Python codec
    (Col(T.VARCHAR, u16(20), charset=63), _prefixed(1, 20, _TEXT)),
    (Col(T.STRING, bytes([T.STRING, 4]), charset=63), _prefixed(1, 4, _TEXT)),  # BINARY(4)
    (Col(T.STRING, bytes([T.STRING, 40]), charset=45), _prefixed(1, 40, _TEXT)),
    *[(Col(T.BLOB, bytes([w]), charset=cs), _prefixed(w, 60, _TEXT))
      for w in (1, 2, 3, 4) for cs in (45, 63)],
    (Col(T.DATE), _date),
    *[(Col(T.DATETIME2, bytes([fsp])), _dt2(fsp)) for fsp in range(7)],
    *[(Col(T.TIMESTAMP2, bytes([fsp])), _ts2(fsp)) for fsp in range(7)],
    *[(Col(T.NEWDECIMAL, bytes([p, s])), _decimal(p, s))
      for p, s in ((12, 2), (18, 0), (18, 18), (5, 5), (30, 10), (65, 30), (1, 0))],
    (Col(T.STRING, bytes([T.ENUM, 1]), labels=("new", "active", "ç")),
     _pick([b"\x00", b"\x01", b"\x03"])),
    (Col(T.STRING, bytes([T.ENUM, 2]), labels=("x", "y")), _pick([b"\x00\x00", b"\x02\x00"])),
    (Col(T.YEAR), lambda rng: bytes([rng.randrange(256)])),
    *[(Col(T.BIT, bytes([bits % 8, bits // 8])), _bit(bits)) for bits in (1, 10, 63, 64)],
    *[(Col(T.TIME2, bytes([fsp])), _time2(fsp)) for fsp in range(7)],
    (Col(T.STRING, bytes([T.SET, 1]), labels=("x", "y", "ç")),
     lambda rng: bytes([rng.randrange(8)])),
    (Col(T.STRING, bytes([T.SET, 2]), labels=tuple("abcdefghij")),
     lambda rng: rng.randrange(1024).to_bytes(2, "little")),
    (Col(T.JSON, b"\x04"), _json),
    (Col(T.GEOMETRY, b"\x04"), _prefixed(4, 40, [b"\x01\x01\0\0\0", b"\0" * 8, b"\xff"])),
]
ENUMS = [i for i, (c, _) in enumerate(COLUMNS) if c.meta[:1] == bytes([T.ENUM])]


def _table(cols: list[Col]) -> TableMapEvent:
    real = [c.meta[0] if c.type_code == T.STRING else c.type_code for c in cols]
    numeric = [i for i, t in enumerate(real) if t in NUMERIC_TYPES]
    character = [i for i, t in enumerate(real) if t in CHARACTER_TYPES]
    enums = [i for i, t in enumerate(real) if t == T.ENUM]
    sets = [i for i, t in enumerate(real) if t == T.SET]
    return decode_table_map(header(19), memoryview(table_map_body(
        cols, numeric=numeric, character=character, enums=enums, sets=sets)), 8)


TABLE = _table([c for c, _ in COLUMNS])


def _decode(body: bytes, kind: RowsKind, use_native: bool,
            table: TableMapEvent = TABLE) -> RowsEvent | type[BaseException]:
    with mock.patch.object(native, "ENABLED", use_native):
        cache = DecoderCache()
        try:
            event = decode_rows_event(header(), memoryview(body), 8, {table.table_id: table},
                                      version=1, kind=kind, decoders=cache)
        except EventDecodeError as exc:
            return type(exc)
    return event


def _norm(v: Any) -> Any:
    """Values compared with their type (True != 1 here) and NaN equal to itself."""
    if isinstance(v, float) and math.isnan(v):
        return ("nan",)
    if isinstance(v, Decimal):
        return ("dec", v.as_tuple())
    if isinstance(v, datetime.datetime):
        return ("dt", v, v.tzinfo)
    return (type(v).__name__, v)


def _same(body: bytes, kind: RowsKind) -> RowsEvent | type[BaseException]:
    py = _decode(body, kind, False)
    nat = _decode(body, kind, True)
    if isinstance(py, RowsEvent):
        assert isinstance(nat, RowsEvent), f"native raised {nat}, Python decoded"
        assert nat.row_count == py.row_count
        for side in ("before", "after"):
            a, b = getattr(py, side), getattr(nat, side)
            assert (a is None) == (b is None)
            if a is not None:
                assert [[_norm(v) for v in col] for col in a] == \
                    [[_norm(v) for v in col] for col in b]
    else:
        assert nat is py, f"native gave {nat}, Python {py}"
    return py


def _rows(rng: random.Random, count: int) -> list[bytes]:
    return [image([None if rng.random() < 0.15 else enc(rng) for _, enc in COLUMNS])
            for _ in range(count)]


def test_the_native_path_is_taken() -> None:
    with mock.patch.object(native, "ENABLED", True):
        cache = DecoderCache()
        decode_rows_event(header(), memoryview(rows_body(len(COLUMNS), [])), 8,
                          {TABLE.table_id: TABLE}, version=1, kind=RowsKind.INSERT,
                          decoders=cache)
        decoder = cache.decoder_for(TABLE)
        assert decoder.native_plan(None, tuple(range(len(COLUMNS)))) is not None
        # a type it does not cover (the pre-5.6 DATETIME) keeps the Python decoder for that shape
        old_table = _table([Col(T.LONG), Col(T.DATETIME)])
        assert DecoderCache().decoder_for(old_table).native_plan(None, (0, 1)) is None
        assert DecoderCache().decoder_for(old_table).native_plan(None, (0,)) is not None
    with mock.patch.object(native, "ENABLED", False):
        assert DecoderCache().decoder_for(TABLE).native_plan(None, (0,)) is None


def test_random_rows_of_every_type_decode_alike() -> None:
    rng = random.Random(17)
    width = len(COLUMNS)
    for _ in range(ROUNDS // 10 + 1):
        rows = _rows(rng, rng.randrange(1, 8))
        ev = _same(rows_body(width, rows), RowsKind.INSERT)
        assert isinstance(ev, RowsEvent) and ev.row_count == len(rows)
        pairs = _rows(rng, 2 * rng.randrange(1, 4))
        ev = _same(rows_body(width, pairs, present2=range(width)), RowsKind.UPDATE)
        assert isinstance(ev, RowsEvent) and ev.row_count == len(pairs) // 2


def test_minimal_images_decode_alike() -> None:
    rng = random.Random(3)
    width = len(COLUMNS)
    for _ in range(ROUNDS // 10 + 1):
        present = sorted(rng.sample(range(width), rng.randrange(1, width)))
        rows = [image([None if rng.random() < 0.2 else COLUMNS[i][1](rng) for i in present])
                for _ in range(rng.randrange(1, 5))]
        ev = _same(rows_body(width, rows, present=present), RowsKind.DELETE)
        assert isinstance(ev, RowsEvent) and ev.row_count == len(rows)


def corrupted_events(same: Callable[[bytes, RowsKind], object],
                     rows: Callable[[random.Random, int], list[bytes]]) -> dict[str, int]:
    """ROUNDS events of random rows, truncated half of the time and bit-flipped 1-5 times, each
    checked by ``same``; how many decoded and how many raised which typed error."""
    rng = random.Random(99)
    width = len(COLUMNS)
    outcomes: dict[str, int] = {}
    for _ in range(ROUNDS):
        body = bytearray(rows_body(width, rows(rng, rng.randrange(1, 4))))
        head = len(rows_body(width, []))
        if rng.random() < 0.5:
            del body[rng.randrange(head, len(body)):]
        for _ in range(rng.randrange(1, 6)):
            pos = rng.randrange(head, len(body)) if len(body) > head else head - 1
            body[pos] ^= 1 << rng.randrange(8)
        result = same(bytes(body), RowsKind.INSERT)
        key = "ok" if isinstance(result, RowsEvent) else result.__name__  # type: ignore[attr-defined]
        outcomes[key] = outcomes.get(key, 0) + 1
    return outcomes


def test_truncated_and_corrupted_events_fail_alike() -> None:
    outcomes = corrupted_events(_same, _rows)
    # both outcomes were exercised: decoded garbage and typed errors
    assert set(outcomes) == {"ok", "RowDecodeError"}, outcomes


def test_corrupt_values_raise_the_same_typed_error() -> None:
    cases = [
        (Col(T.NEWDECIMAL, bytes([12, 2])), b"\xff" * 6),  # digit group out of range
        (Col(T.DATETIME2, bytes([2])), b"\x80\0\0\0\0\xff"),  # fraction 2550000
        (Col(T.TIMESTAMP2, bytes([2])), b"\0\0\0\1\xff"),
        (Col(T.STRING, bytes([T.ENUM, 1]), labels=("a",)), b"\x05"),
        (Col(T.VARCHAR, u16(80), charset=45), b"\x09abc"),  # runs past the event
        (Col(T.BLOB, b"\x04", charset=63), b"\xff\xff\xff\xff"),
        (Col(T.LONGLONG), b"\x01\x02"),
        (Col(T.TIME2, b"\x00"), (0x800000 + 63).to_bytes(3, "big")),  # second 63
        (Col(T.STRING, bytes([T.SET, 1]), labels=("a", "b")), b"\x04"),  # bit beyond members
        (Col(T.BIT, b"\x00\x02"), b"\x01"),  # runs past the event
        (Col(T.JSON, b"\x04"), b"\x03\0\0\0\x0c\x05a"),  # a string longer than its value
    ]
    for col, stored in cases:
        table = _table([col])
        body = rows_body(1, [image([stored])])
        py = _decode(body, RowsKind.INSERT, False, table)
        nat = _decode(body, RowsKind.INSERT, True, table)
        assert py is nat, (col, py, nat)
        assert py.__name__ == "RowDecodeError"  # type: ignore[union-attr]


def test_the_switch_and_the_warning() -> None:
    lines: list[str] = []
    with mock.patch.object(native, "AVAILABLE", False), \
            mock.patch.object(native, "_warned", False), \
            mock.patch.dict(os.environ, {"BINLAKE_NATIVE": "1"}):
        native.warn_once(lines.append)
        native.warn_once(lines.append)
    assert len(lines) == 1 and "pure-Python decoder" in lines[0]
    lines.clear()
    with mock.patch.object(native, "AVAILABLE", False), \
            mock.patch.object(native, "_warned", False), \
            mock.patch.dict(os.environ, {"BINLAKE_NATIVE": "0"}):
        native.warn_once(lines.append)  # switched off on purpose: nothing to say
    assert lines == []
    # the rows decoder built, the framing not (an in-place build older than it): said too
    from protocol import native_frames

    with mock.patch.object(native, "AVAILABLE", True), \
            mock.patch.object(native, "_warned", False), \
            mock.patch.object(native_frames, "UNAVAILABLE_REASON", "the native binlog framing "
                              "is not built (No module named 'protocol._native_frames')"), \
            mock.patch.dict(os.environ, {"BINLAKE_NATIVE": "1"}):
        native.warn_once(lines.append)
        native.warn_once(lines.append)
    assert lines == ["the native binlog framing is not built (No module named "
                     "'protocol._native_frames'): events are framed in Python (same events, "
                     "slower); reinstall binlake (or `python setup.py build_ext --inplace` in a "
                     "checkout) to build it"]


def _mixed_cost() -> None:
    """Per-row decode cost on workload (a)'s shape (8 mixed columns, 1000-row events):
    ``python -m tests.unit.test_native_rows``."""
    cols = [(Col(T.LONG), _int(4, False)), (Col(T.LONGLONG), _int(8, False)),
            (Col(T.VARCHAR, u16(256), charset=45), _prefixed(2, 20, [b"name-", b"1", b"7"])),
            (Col(T.NEWDECIMAL, bytes([12, 2])), _decimal(12, 2)),
            (Col(T.DATETIME2, bytes([6])), _dt2(6)), (Col(T.DOUBLE, b"\x08"),
                                                    lambda rng: struct.pack("<d", rng.random())),
            (Col(T.BLOB, b"\x02", charset=45), _prefixed(2, 240, [b"lorem ipsum "])),
            (Col(T.STRING, bytes([T.ENUM, 1]), labels=("new", "active", "suspended", "closed")),
             _pick([b"\x01", b"\x02", b"\x03", b"\x04"]))]
    table = _table([c for c, _ in cols])
    rng = random.Random(1)
    body = rows_body(len(cols), [image([enc(rng) for _, enc in cols]) for _ in range(1000)])
    for use in (False, True):
        with mock.patch.object(native, "ENABLED", use):
            cache = DecoderCache()
            events = 0
            started = time.process_time()
            while time.process_time() - started < 2.0:
                decode_rows_event(header(), memoryview(body), 8, {table.table_id: table},
                                  version=1, kind=RowsKind.INSERT, decoders=cache)
                events += 1
            spent = time.process_time() - started
        print(f"{'native' if use else 'python'}: {spent / events / 1000 * 1e6:.3f} µs/row "
              f"({events * 1000 / spent:,.0f} rows/s CPU)")


if __name__ == "__main__":
    _mixed_cost()
