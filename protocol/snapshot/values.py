"""``SELECT`` expressions that bring a column's value back exactly, and their text → its value.

The value is the one the binlog's row decoder gives for the same stored bytes.

A snapshot row and a binlog row of the same table must land identically (same Arrow type, same
value), so for every column type this module pairs an expression for the text protocol with a
converter to what ``protocol.binlog.rows`` would put in ``RowsEvent.after``. Where the plain
column's text is not exact, the expression makes it so:

* FLOAT prints rounded to 6 digits: ``CAST(c AS DOUBLE)`` prints the float's exact double in
  the shortest round-trip form (all three servers), rounded back to 32 bits here; DOUBLE goes
  through the same cast so ``DOUBLE(M,D)`` is not printed rounded to D digits.
* TIMESTAMP prints in the session's time zone: ``UNIX_TIMESTAMP(c)`` is the stored number of
  seconds (with the fraction), whatever the time zone; ``0`` is the zero TIMESTAMP.
* Character and binary strings: the column itself, on a connection that converts no results
  (:data:`SESSION_SETUP`: ``character_set_results = NULL``), gives the stored bytes in the
  column's own character set (no conversion to the connection's, which could replace what does
  not convert), decoded here with the column's collation exactly as the row decoder does —
  bytes stay bytes where the binlog's would (no codec, binary collation, invalid in the
  charset). Not ``CAST(c AS BINARY)``: the same bytes, at the cost of a copy of every value in
  the server.
* ENUM and SET: ``CAST(c AS UNSIGNED)`` is the stored index / bit mask, mapped to labels
  through the same label lists the TABLE_MAP carries (index 0 is ``''``); BIT: the same cast
  is its number. (``c + 0`` is not exact: a SET with its 64th member comes back negative, or
  on MySQL as a rounded double.)
* VECTOR: ``HEX(c)``; MariaDB's UUID/INET4/INET6 print as text and are packed back into the
  binary CHAR the binlog carries for them.

Everything else (integers, YEAR, DECIMAL, DATE, DATETIME, TIME, MySQL JSON, GEOMETRY) prints
exactly as is. Zero and invalid dates become :class:`~protocol.binlog.values.InvalidTemporal`
holding the text SELECT prints — the same text the row decoder builds.
"""

from __future__ import annotations

import datetime
import ipaddress
import struct
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any

from ..binlog import native as _native
from ..binlog.coltypes import FieldType
from ..binlog.model import Column
from ..binlog.rows import native_spec, set_labels
from ..results import TEXT_DEFAULT, TEXT_FLOAT, TEXT_INT, TEXT_UTF8
from ..valuetypes import binary_json, characters, newdecimal, time2, timestamp2
from ..valuetypes.characters import text_decoder, text_rule
from ..valuetypes.temporal import InvalidTemporal

__all__ = ["SESSION_SETUP", "quote_name", "select_expression", "converter_for", "column_converter",
           "wire_kind", "text_spec", "PYTHON_SPEC", "Converter", "ColumnConverter"]

Converter = Callable[[Any], Any]
"""One non-NULL value as the text protocol returns it → the row decoder's value. The value is
``bytes``, or ``str`` as ``Connection.query`` gives non-binary columns (decoded as UTF-8 with
``surrogateescape``, so the bytes are recovered exactly)."""

ColumnConverter = Callable[[Sequence[Any]], list[Any]]
"""A whole column of non-NULL values → the list a :data:`Converter` gives value by value (a
snapshot converts millions of values: one Python call per value would be most of its CPU time)."""

_date_of = datetime.date.fromisoformat
_datetime_of = datetime.datetime.fromisoformat
_F32 = struct.Struct("<f")
_STRINGS = frozenset({FieldType.VARCHAR, FieldType.VAR_STRING, FieldType.STRING,
                      FieldType.BLOB, FieldType.TINY_BLOB, FieldType.MEDIUM_BLOB,
                      FieldType.LONG_BLOB})


#: The statements a connection runs before it reads :func:`select_expression`'s columns: no
#: conversion of results to the connection's character set (NULL: every string value is sent
#: as stored, in its column's character set; the column definitions keep their own charset).
#: Harmless for the other reads a snapshot makes on the connection: ``information_schema``
#: text is utf8mb3, which needs no conversion to be read as UTF-8.
SESSION_SETUP: tuple[str, ...] = ("SET SESSION character_set_results = NULL",)


def quote_name(name: str) -> str:
    """An identifier in backticks (a backtick inside doubled)."""
    return "`" + name.replace("`", "``") + "`"


def select_expression(column: Column, name: str, data_type: str = "") -> str:
    """The expression that selects ``column`` (called ``name``) exactly; ``data_type`` is its
    ``information_schema`` DATA_TYPE (tells MariaDB's UUID/INET from a BINARY)."""
    c = quote_name(name)
    t = column.type_code
    if t in (FieldType.FLOAT, FieldType.DOUBLE):
        return f"CAST({c} AS DOUBLE)"
    if t in (FieldType.TIMESTAMP, FieldType.TIMESTAMP2):
        return timestamp2.select_expression(c)
    if t in (FieldType.ENUM, FieldType.SET, FieldType.BIT):
        return f"CAST({c} AS UNSIGNED)"
    if t == FieldType.VECTOR:
        return f"HEX({c})"
    if t in _STRINGS and data_type not in ("uuid", "inet4", "inet6"):
        return characters.select_expression(c)
    return c


def _text(raw: bytes | str) -> str:
    return raw if isinstance(raw, str) else raw.decode("utf-8", "surrogateescape")


def _bytes(raw: bytes | str) -> bytes:
    return raw.encode("utf-8", "surrogateescape") if isinstance(raw, str) else raw


def _int(raw: bytes | str) -> int:
    return int(raw)


def _float(raw: bytes | str) -> float:
    return _F32.unpack(_F32.pack(float(raw)))[0]  # type: ignore[no-any-return]


def _double(raw: bytes | str) -> float:
    return float(raw)


_decimal = newdecimal.from_text


def _date(raw: bytes | str) -> datetime.date | InvalidTemporal:
    text = _text(raw)
    try:
        return _date_of(text)
    except ValueError:  # a zero or invalid date: what SELECT printed
        return InvalidTemporal(text)


def _datetime(raw: bytes | str) -> datetime.datetime | InvalidTemporal:
    text = _text(raw)
    try:  # the server's 'YYYY-MM-DD hh:mm:ss[.f{1,6}]' is ISO 8601: the C parser
        return _datetime_of(text)
    except ValueError:
        return InvalidTemporal(text)


_time = time2.from_text


class _Characters:
    """The row decoder's rule (``valuetypes.characters.text_rule``): the column's charset conversion, bytes
    where there is none or the value is not valid in it; a BINARY(n) comes back padded."""

    __slots__ = ("decode", "utf8")

    def __init__(self, column: Column) -> None:
        self.decode = text_decoder(column.charset)
        self.utf8 = text_rule(column.charset) == ("codec", "utf-8")

    def __call__(self, raw: bytes | str) -> str | bytes:
        return self.decode(_bytes(raw))


def _characters(column: Column) -> Converter:
    return _Characters(column)


class _Labels:
    """ENUM: the stored index → its label (index 0 is ``''``)."""

    __slots__ = ("table",)

    def __init__(self, labels: tuple[str, ...]) -> None:
        self.table = ("",) + labels

    def __call__(self, raw: bytes | str) -> str:
        return self.table[int(raw)]


def _labels(labels: tuple[str, ...] | None) -> Converter:
    if labels is None:
        return _int
    return _Labels(labels)


def _set(labels: tuple[str, ...] | None) -> Converter:
    if labels is None:
        return _int
    text = set_labels(labels)
    return lambda raw: text(int(raw))


_json = binary_json.from_text


def _unhex(raw: bytes | str) -> bytes:
    return bytes.fromhex(_text(raw))


def _uuid(raw: bytes | str) -> bytes:
    return bytes.fromhex(_text(raw).replace("-", ""))


def _inet4(raw: bytes | str) -> bytes:
    return ipaddress.IPv4Address(_text(raw)).packed


def _inet6(raw: bytes | str) -> bytes:
    return ipaddress.IPv6Address(_text(raw)).packed


_BY_DATA_TYPE: dict[str, Converter] = {"uuid": _uuid, "inet4": _inet4, "inet6": _inet6}
_FIXED: dict[int, Converter] = {
    FieldType.TINY: _int, FieldType.SHORT: _int, FieldType.INT24: _int, FieldType.LONG: _int,
    FieldType.LONGLONG: _int, FieldType.YEAR: _int, FieldType.BIT: _int,
    FieldType.FLOAT: _float, FieldType.DOUBLE: _double,
    FieldType.NEWDECIMAL: _decimal, FieldType.DECIMAL: _decimal,
    FieldType.DATE: _date, FieldType.NEWDATE: _date,
    FieldType.DATETIME: _datetime, FieldType.DATETIME2: _datetime,
    FieldType.TIME: _time, FieldType.TIME2: _time,
    FieldType.JSON: _json, FieldType.VECTOR: _unhex, FieldType.GEOMETRY: _bytes,
}


def converter_for(column: Column, data_type: str = "") -> Converter:
    """The converter for values of :func:`select_expression` of ``column``."""
    special = _BY_DATA_TYPE.get(data_type)
    if special is not None:
        return special
    t = column.type_code
    if t in (FieldType.TIMESTAMP, FieldType.TIMESTAMP2):
        return timestamp2.from_text(column.scale or 0)
    if t == FieldType.ENUM:
        return _labels(column.enum_values)
    if t == FieldType.SET:
        return _set(column.set_values)
    if t in _STRINGS:
        return _characters(column)
    converter = _FIXED.get(t)
    if converter is None:
        return _bytes  # NULL and anything newer: the bytes, as the row decoder keeps them
    return converter


def _only(kind: type, values: Sequence[Any]) -> bool:
    return set(map(type, values)) == {kind}


def column_converter(convert: Converter) -> ColumnConverter:
    """The column-at-a-time form of ``convert`` (from :func:`converter_for`): the same values
    as ``[convert(v) for v in values]`` for a column without NULLs, by C-level ``map`` over a
    builtin where one gives the same result, else value by value."""
    if convert is _int:
        return lambda values: list(map(int, values))
    if convert is _double:
        return lambda values: list(map(float, values))
    if convert is _decimal:
        def decimals(values: Sequence[Any]) -> list[Any]:
            if _only(str, values):
                return list(map(Decimal, values))
            return list(map(convert, values))
        return decimals
    if convert is _datetime:
        def datetimes(values: Sequence[Any]) -> list[Any]:
            if _only(str, values):
                try:
                    return list(map(_datetime_of, values))
                except ValueError:
                    pass  # a zero or invalid date among them: value by value
            return list(map(convert, values))
        return datetimes
    if isinstance(convert, _Characters):
        decode = convert.decode

        def characters(values: Sequence[Any]) -> list[Any]:
            if _only(bytes, values):
                return list(map(decode, values))
            return list(map(convert, values))
        return characters
    if isinstance(convert, _Labels):
        table = convert.table
        return lambda values: [table[i] for i in map(int, values)]
    return lambda values: list(map(convert, values))


def _label_column(table: tuple[str, ...]) -> ColumnConverter:
    def labels(values: Sequence[Any]) -> list[Any]:
        if None in values:
            return [None if i is None else table[i] for i in values]
        return [table[i] for i in values]
    return labels


def wire_kind(convert: Converter) -> tuple[int, ColumnConverter | None]:
    """What a columnar read (``protocol.results.TEXT_*``) should make of the text of a column
    ``convert`` converts, and what then turns a whole column of those values (NULLs
    included) into the converter's values: None when they already are (a plain number's
    ``int``/``float``, a UTF-8 column's ``str``-or-``bytes``: exactly ``convert``'s results).
    ``TEXT_DEFAULT`` (keep the text) for every other converter, which then runs as usual."""
    if convert is _int:
        return TEXT_INT, None
    if convert is _double:
        return TEXT_FLOAT, None
    if isinstance(convert, _Labels):
        return TEXT_INT, _label_column(convert.table)
    if isinstance(convert, _Characters) and convert.utf8:
        return TEXT_UTF8, None
    return TEXT_DEFAULT, None


#: A native plan entry with no Arrow layout: the column's values are converted in Python.
PYTHON_SPEC: tuple[Any, ...] = (_native.K_ENUM, 1, 0, 0, None, None)

_TEXT_KINDS = frozenset({_native.K_INT, _native.K_FLOAT, _native.K_DATE, _native.K_DT2,
                         _native.K_TS2, _native.K_DEC, _native.K_ENUM, _native.K_YEAR,
                         _native.K_BIT, _native.K_TIME2, _native.K_SET})


def text_spec(column: Column, convert: Converter) -> tuple[Any, ...]:
    """The native plan entry (``protocol.binlog.native.plan``) for ``native.text_arrow`` to
    turn the text of :func:`select_expression` of ``column`` straight into the Arrow chunk the
    binlog decoder makes of the same value (the binlog's own entry, ``rows.native_spec``, so
    the layout and its tag are the same), or :data:`PYTHON_SPEC` where ``convert`` (the
    reference) must: a charset with no native check, VECTOR's hex, MariaDB's UUID/INET.

    The text is what the expression prints (an integer, ``CAST(… AS UNSIGNED)``'s ENUM index /
    SET mask / BIT number, a double, ``UNIX_TIMESTAMP``'s seconds, a date, …); ``text_arrow``
    leaves a whole column to ``convert`` at the first value not in that form or with no Arrow
    value of that layout (a zero date, the zero TIMESTAMP, a string not valid UTF-8), so the
    values are the reference's either way (``tests/unit/test_snapshot_arrow.py``)."""
    if convert in _BY_DATA_TYPE.values():
        return PYTHON_SPEC
    spec = native_spec(column)
    if spec is None:
        return PYTHON_SPEC
    kind = spec[0]
    if kind in _TEXT_KINDS:
        return spec
    if kind != _native.K_STR:
        return PYTHON_SPEC
    width = spec[1]
    if convert is _json:  # MySQL JSON: its text, strict UTF-8
        return (_native.K_STR, width, 1, 0, None, None)
    if convert is _bytes:  # GEOMETRY: the bytes as stored
        return (_native.K_STR, width, 0, 0, None, None)
    if isinstance(convert, _Characters) and spec[2] in (0, 1):
        return (_native.K_STR, width, spec[2], 0, None, None)  # SELECT gives BINARY(n) padded
    return PYTHON_SPEC
