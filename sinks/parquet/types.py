"""MySQL/MariaDB column types → Arrow types Spark reads correctly, and the value converters.

The mapping is the landing contract (see ``docs/lake-format.md``): every choice below exists because
Spark would otherwise misread or refuse the file:

* timestamps are microseconds (Spark fails on nanoseconds and we never write INT96);
  ``DATETIME`` is a timestamp *without* time zone, ``TIMESTAMP`` a UTC timestamp;
* ``DECIMAL(p<=38)`` is ``decimal128(p, s)``, wider decimals are strings (Spark stops at 38);
* ``BIGINT UNSIGNED`` is ``decimal(20,0)``, other unsigned integers widen to the next signed int;
* ``TIME`` is int64 microseconds (a duration up to ±838 h, not a time of day);
* ``ENUM``/``SET`` land as their labels, ``BIT`` as int64 (two's complement above 2**63),
  ``JSON`` as text, binary strings as binary, zero dates as NULL.

A converter turns one column's Python values (a list, straight from a ``RowsEvent``) into an
Arrow array. The fast path hands the list to ``pa.array`` in one call; only when that refuses
(a zero date, a value of a neighbouring type) does the slow path normalize value by value.
"""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any

import pyarrow as pa

from protocol.binlog.coltypes import FieldType
from protocol.binlog.model import Column, ColumnFlag

from ..errors import UnsupportedValue
from ..transform import BOOLEAN

BINARY_CHARSET = 63
MAX_ARROW_DECIMAL_PRECISION = 38

UTC = _dt.UTC
TIMESTAMP_NTZ = pa.timestamp("us")
TIMESTAMP_UTC = pa.timestamp("us", tz="UTC")
UNSIGNED_BIGINT = pa.decimal128(20, 0)

_SIGNED_INTS: dict[int, pa.DataType] = {
    FieldType.TINY: pa.int8(), FieldType.SHORT: pa.int16(), FieldType.INT24: pa.int32(),
    FieldType.LONG: pa.int32(), FieldType.LONGLONG: pa.int64(),
}
_UNSIGNED_INTS: dict[int, pa.DataType] = {
    FieldType.TINY: pa.int16(), FieldType.SHORT: pa.int32(), FieldType.INT24: pa.int32(),
    FieldType.LONG: pa.int64(), FieldType.LONGLONG: UNSIGNED_BIGINT,
}
_DECIMAL_TYPES = frozenset({FieldType.DECIMAL, FieldType.NEWDECIMAL})
_TIME_TYPES = frozenset({FieldType.TIME, FieldType.TIME2})
_STRING_TYPES = frozenset({FieldType.VARCHAR, FieldType.VAR_STRING, FieldType.STRING})
_BLOB_TYPES = frozenset({FieldType.TINY_BLOB, FieldType.MEDIUM_BLOB, FieldType.LONG_BLOB,
                         FieldType.BLOB})

Converter = Callable[[Sequence[Any]], pa.Array]
"""One column's values (SQL NULL as ``None``) → an Arrow array of the column's type."""


def is_binary(column: Column) -> bool:
    """A string column holding bytes: binary charset (63) or the BINARY flag."""
    return bool(column.flags & ColumnFlag.BINARY) or column.charset == BINARY_CHARSET


def arrow_type_for(column: Column) -> pa.DataType:
    """The Arrow type a column lands as (see the module docstring for why)."""
    code = column.type_code
    if column.transform == BOOLEAN:  # [types] tinyint1_as_boolean (sinks.transform)
        return pa.bool_()
    if code in _SIGNED_INTS:
        return _UNSIGNED_INTS[code] if column.unsigned else _SIGNED_INTS[code]
    if code in _DECIMAL_TYPES:
        precision = column.precision or 0
        if 0 < precision <= MAX_ARROW_DECIMAL_PRECISION:
            return pa.decimal128(precision, column.scale or 0)
        return pa.string()
    if code == FieldType.FLOAT:
        return pa.float32()
    if code == FieldType.DOUBLE:
        return pa.float64()
    if code in (FieldType.TIMESTAMP, FieldType.TIMESTAMP2):
        return TIMESTAMP_UTC
    if code in (FieldType.DATETIME, FieldType.DATETIME2):
        return TIMESTAMP_NTZ
    if code in (FieldType.DATE, FieldType.NEWDATE):
        return pa.date32()
    if code in _TIME_TYPES:
        return pa.int64()
    if code == FieldType.YEAR:
        return pa.int16()
    if code == FieldType.BIT:
        return pa.int64()
    if code in (FieldType.ENUM, FieldType.SET, FieldType.JSON):
        return pa.string()
    if code in _STRING_TYPES:
        return pa.binary() if is_binary(column) else pa.string()
    if code in _BLOB_TYPES:
        # Without charset metadata a BLOB and a TEXT look alike; bytes is the lossless choice.
        if column.charset is None and not column.flags & ColumnFlag.BINARY:
            return pa.binary()
        return pa.binary() if is_binary(column) else pa.string()
    # GEOMETRY (WKB), VECTOR, NULL and anything newer: the bytes, verbatim.
    return pa.binary()


_NATIVE_TAGS: dict[pa.DataType, str] = {
    pa.int8(): "i1", pa.int16(): "i2", pa.int32(): "i4", pa.int64(): "i8", pa.float32(): "f4",
    pa.float64(): "f8", pa.date32(): "date", pa.string(): "str", pa.binary(): "bin",
    TIMESTAMP_NTZ: "ts", TIMESTAMP_UTC: "ts",
}
_NATIVE_INTS = frozenset({*_SIGNED_INTS, FieldType.YEAR, FieldType.BIT, FieldType.TIME2})
_NATIVE_STRINGS = _STRING_TYPES | _BLOB_TYPES | {FieldType.ENUM, FieldType.SET, FieldType.JSON,
                                                  FieldType.GEOMETRY, FieldType.VECTOR}


def native_tag(column: Column, arrow_type: pa.DataType) -> str | None:
    """The layout of the native decoder's Arrow chunks (``protocol.binlog.native``) this column
    lands from as they are, or None when it always lands from Python values.

    A chunk is used only when its tag is this one, or an unsigned integer layout that widens to
    it (``_native_batch.c`` zero-extends it): the decoder keeps each value as the binlog type
    holds it, the lake's type is chosen here. A column whose Arrow type says otherwise (a
    VARCHAR with the BINARY flag, a string without charset metadata) falls back to the Python
    values, and the schema the lake lands cannot change through the native path. Wide DECIMAL
    and the pre-5.6 temporal types have no native layout (the decoder leaves their values to
    Python).
    """
    if pa.types.is_decimal(arrow_type):
        return "dec"  # DECIMAL(p <= 38) as scaled integers, BIGINT UNSIGNED (u8) as decimal(20,0)
    tag = _NATIVE_TAGS.get(arrow_type)
    code = column.type_code
    if tag is None or (tag[0] == "i" and code not in _NATIVE_INTS) or (
            tag in ("str", "bin") and code not in _NATIVE_STRINGS):
        return None
    return tag


# Arrow types Spark reads under a fixed name; parametrized ones are spelled out below.
_SPARK_NAMES: dict[pa.DataType, str] = {
    pa.int8(): "tinyint", pa.int16(): "smallint", pa.int32(): "int", pa.int64(): "bigint",
    pa.float32(): "float", pa.float64(): "double", pa.date32(): "date", pa.string(): "string",
    pa.binary(): "binary", pa.bool_(): "boolean",
}


def spark_type_name(arrow_type: pa.DataType) -> str:
    """The Spark SQL type name Spark gives a Parquet column written with ``arrow_type``."""
    name = _SPARK_NAMES.get(arrow_type)
    if name is not None:
        return name
    if pa.types.is_decimal(arrow_type):
        return f"decimal({arrow_type.precision},{arrow_type.scale})"
    if pa.types.is_timestamp(arrow_type):
        return "timestamp" if arrow_type.tz is not None else "timestamp_ntz"
    if pa.types.is_list(arrow_type):
        return f"array<{spark_type_name(arrow_type.value_type)}>"
    raise ValueError(f"no Spark type for {arrow_type}")


def type_description(column: Column) -> str:
    """A readable MariaDB-side type, for field metadata: ``LONGLONG UNSIGNED``, ``NEWDECIMAL(40,2)``."""
    try:
        name = FieldType(column.type_code).name
    except ValueError:
        name = f"TYPE_{column.type_code}"
    if column.type_code in _DECIMAL_TYPES and column.precision is not None:
        name += f"({column.precision},{column.scale or 0})"
    if column.unsigned:
        name += " UNSIGNED"
    return name


# --- value normalization (the slow path) ---------------------------------------------------------


def is_invalid_temporal(value: object) -> bool:
    """A zero date/datetime (``0000-00-00``) as the row decoder reports it; lands as NULL."""
    return type(value).__name__ == "InvalidTemporal"


class _Counter:
    """Counts zero dates turned into NULL, for the sink's statistics."""

    __slots__ = ("invalid_temporal",)

    def __init__(self) -> None:
        self.invalid_temporal = 0


def _to_int(value: Any) -> Any:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return int.from_bytes(bytes(value), "big")
    if isinstance(value, Decimal) and value == value.to_integral_value():
        return int(value)
    if isinstance(value, str) and value.lstrip("-").isdigit():
        return int(value)
    return _Unsupported


def _to_bit(value: Any) -> Any:
    number = _to_int(value)
    if number is _Unsupported:
        return number
    return number - (1 << 64) if number >= (1 << 63) else number


def _to_decimal(value: Any) -> Any:
    if isinstance(value, Decimal):
        return value
    if isinstance(value, int | str):
        return Decimal(value)
    if isinstance(value, float):
        return Decimal(repr(value))
    return _Unsupported


def _decimal_text(value: Any) -> Any:
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, int | float):
        return format(Decimal(repr(value) if isinstance(value, float) else value), "f")
    if isinstance(value, str):
        return value
    return _Unsupported


def _to_float(value: Any) -> Any:
    if isinstance(value, int | float | Decimal):
        return float(value)
    return _Unsupported


def _to_date(value: Any) -> Any:
    if isinstance(value, _dt.datetime):
        return value.date()
    if isinstance(value, _dt.date):
        return value
    return _Unsupported


def _to_naive_datetime(value: Any) -> Any:
    if isinstance(value, _dt.datetime):
        if value.tzinfo is not None:
            return value.astimezone(UTC).replace(tzinfo=None)
        return value
    if isinstance(value, _dt.date):
        return _dt.datetime(value.year, value.month, value.day)
    return _Unsupported


def _to_utc_datetime(value: Any) -> Any:
    if isinstance(value, _dt.datetime):
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    if isinstance(value, int | float | Decimal) and not isinstance(value, bool):
        return _dt.datetime.fromtimestamp(float(value), UTC)
    return _Unsupported


def _to_micros(value: Any) -> Any:
    if isinstance(value, _dt.timedelta):
        return (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return _Unsupported


def _to_text(value: Any) -> Any:
    if isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "replace")
    return _Unsupported


def _to_json_text(value: Any) -> Any:
    text = _to_text(value)
    if text is not _Unsupported:
        return text
    return json.dumps(value, ensure_ascii=False, default=str)


def _to_bytes(value: Any) -> Any:
    if isinstance(value, bytes):
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    return _Unsupported


def _label_normalizer(column: Column) -> Callable[[Any], Any]:
    """ENUM/SET values to labels: an index or bitmask is looked up, a collection joined."""
    enum_labels = column.enum_values
    set_labels = column.set_values

    def normalize(value: Any) -> Any:
        if isinstance(value, str):
            return value
        if isinstance(value, bytes | bytearray | memoryview):
            return bytes(value).decode("utf-8", "replace")
        if isinstance(value, int) and not isinstance(value, bool):
            if enum_labels is not None:
                return enum_labels[value - 1] if 0 < value <= len(enum_labels) else ""
            if set_labels is not None:
                return ",".join(label for bit, label in enumerate(set_labels)
                                if value >> bit & 1)
            return str(value)
        if isinstance(value, set | frozenset | list | tuple):
            members = {str(v) for v in value}
            if set_labels is not None:
                return ",".join(label for label in set_labels if label in members)
            return ",".join(sorted(members))
        return _Unsupported

    return normalize


class _UnsupportedType:
    """Sentinel: the normalizer does not know what to do with this value."""


_Unsupported: Any = _UnsupportedType()


def _normalizer_for(column: Column, arrow_type: pa.DataType) -> Callable[[Any], Any]:
    code = column.type_code
    if code == FieldType.BIT:
        return _to_bit
    if code in (FieldType.ENUM, FieldType.SET):
        return _label_normalizer(column)
    if code == FieldType.JSON:
        return _to_json_text
    if code in _TIME_TYPES:
        return _to_micros
    if pa.types.is_integer(arrow_type):
        return _to_int
    if pa.types.is_decimal(arrow_type):
        return _to_decimal
    if code in _DECIMAL_TYPES:
        return _decimal_text
    if pa.types.is_floating(arrow_type):
        return _to_float
    if pa.types.is_date32(arrow_type):
        return _to_date
    if arrow_type == TIMESTAMP_UTC:
        return _to_utc_datetime
    if arrow_type == TIMESTAMP_NTZ:
        return _to_naive_datetime
    if pa.types.is_string(arrow_type):
        return _to_text
    return _to_bytes


def _always_normalize(column: Column, arrow_type: pa.DataType) -> bool:
    """Wide decimals never fit ``pa.array`` directly (Decimal → string): skip the doomed try."""
    return column.type_code in _DECIMAL_TYPES and pa.types.is_string(arrow_type)


_FAST_PATH_ERRORS = (pa.ArrowException, TypeError, ValueError, OverflowError)


def converter_for(column: Column, arrow_type: pa.DataType, qualified_name: str,
                  counter: _Counter) -> Converter:
    """Build the converter for one column of one schema version (resolved once, used per event)."""
    normalize = _normalizer_for(column, arrow_type)
    column_name = qualified_name
    time_column = column.type_code in _TIME_TYPES
    slow_first = _always_normalize(column, arrow_type)

    def slow(values: Sequence[Any]) -> pa.Array:
        out: list[Any] = []
        for value in values:
            if value is None:
                out.append(None)
                continue
            if is_invalid_temporal(value):
                counter.invalid_temporal += 1
                out.append(None)
                continue
            normalized = normalize(value)
            if normalized is _Unsupported:
                table, _, name = column_name.rpartition(".")
                raise UnsupportedValue(table, name, type(value).__name__, str(arrow_type))
            out.append(normalized)
        try:
            return pa.array(out, type=arrow_type)
        except _FAST_PATH_ERRORS as exc:
            table, _, name = column_name.rpartition(".")
            raise UnsupportedValue(table, name, f"out-of-range ({exc})",
                                   str(arrow_type)) from None

    if slow_first:
        return slow

    if time_column:
        def convert_time(values: Sequence[Any]) -> pa.Array:
            try:
                return pa.array(values, type=pa.duration("us")).cast(pa.int64())
            except _FAST_PATH_ERRORS:
                return slow(values)
        return convert_time

    def convert(values: Sequence[Any]) -> pa.Array:
        try:
            return pa.array(values, type=arrow_type)
        except _FAST_PATH_ERRORS:
            return slow(values)

    return convert


new_counter = _Counter
