"""Decoders for the column values that are more than a ``struct`` unpack.

Every function here turns the bytes of one stored value into what ``SELECT`` returns for it:

- DECIMAL → :class:`decimal.Decimal`, exactly (any precision up to 65).
- DATE → :class:`datetime.date`, DATETIME → naive :class:`datetime.datetime`, TIMESTAMP → aware
  UTC datetime, TIME → :class:`datetime.timedelta` (negative and up to ±838:59:59.999999).
- MySQL binary JSON → its JSON text, formatted as MySQL prints it.

**Zero and invalid temporal values.** The server stores dates Python cannot hold: ``0000-00-00``,
``2024-00-10`` (NO_ZERO_IN_DATE off), ``2024-02-30`` (ALLOW_INVALID_DATES), year 0, the zero
TIMESTAMP. The policy is: such a value decodes to :class:`InvalidTemporal`, a small frozen type
holding the exact text ``SELECT`` prints for it. It is never coerced to a nearby valid value,
and it never raises; sinks map it to NULL (and may keep the text alongside).

The functions take ``(buf, offset)`` over a ``bytes`` object and rely on the caller to catch
``IndexError``/``ValueError``/``struct.error`` and report a :class:`~protocol.errors.RowDecodeError`
with the table and column — they are called on the hot path and carry no try blocks themselves.
"""

from __future__ import annotations

import base64
import datetime
import json
import struct
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

__all__ = [
    "InvalidTemporal", "JsonDiff", "JsonDiffOp", "JSON_DIFF_OP_NAMES", "decimal_size", "decimal_size_checked",
    "decimal_groups", "decimal_decoder", "datetime2_invalid",
    "decode_decimal", "decode_date", "decode_datetime2", "decode_timestamp2", "decode_time2",
    "decode_time_old", "decode_datetime_old", "fractional_size", "json_binary_to_text",
    "json_binary_to_python", "json_to_text", "mysql_double_text", "apply_json_diff",
    "apply_json_diff_text",
    "mariadb_uuid_text", "inet4_text", "inet6_text", "decode_mysql_latin1", "time_text",
]

UTC = datetime.UTC
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class InvalidTemporal:
    """A DATE/DATETIME/TIMESTAMP/TIME the server accepted but Python cannot represent.

    ``text`` is what ``SELECT`` prints for the value, e.g. ``'0000-00-00'`` or
    ``'2024-00-10 00:00:00.000'``. Sinks treat it as NULL.
    """

    text: str

    def __str__(self) -> str:
        return self.text


# --- DECIMAL -------------------------------------------------------------------------------------

_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)
_POW10 = tuple(10 ** i for i in range(10))


def decimal_size(precision: int, scale: int) -> int:
    """Stored size in bytes of a DECIMAL(precision, scale)."""
    i0, ix = divmod(precision - scale, 9)
    f0, fx = divmod(scale, 9)
    return i0 * 4 + _DIG2BYTES[ix] + f0 * 4 + _DIG2BYTES[fx]


def decimal_size_checked(precision: int, scale: int) -> int:
    """:func:`decimal_size`, raising ``ValueError`` for a DECIMAL no server can declare."""
    if not (0 < precision <= 65 and 0 <= scale <= 30 and scale <= precision):
        raise ValueError(f"impossible DECIMAL({precision},{scale})")
    return decimal_size(precision, scale)


def decimal_groups(precision: int, scale: int) -> list[tuple[int, int]]:
    """The stored digit groups of a DECIMAL(precision, scale), most significant first, as
    ``(bytes, digits)``: a partial integer group, whole 9-digit groups of the integer part and
    of the fraction, then a partial fraction group. The sign bit is the top bit of the first."""
    i0, ix = divmod(precision - scale, 9)
    f0, fx = divmod(scale, 9)
    groups = [(_DIG2BYTES[ix], ix)] if ix else []
    groups += [(4, 9)] * (i0 + f0)
    if fx:
        groups.append((_DIG2BYTES[fx], fx))
    return groups


def decimal_decoder(precision: int, scale: int) -> tuple[int, Any]:
    """A ``(size, decode(buf, offset) -> Decimal)`` pair specialised for one DECIMAL(p, s).

    The stored form is groups of nine decimal digits in 4 big-endian bytes, with partial groups
    at the outer ends; the sign is the inverted top bit and negative numbers have every byte
    inverted. The whole value is read as one big-endian integer and split with shifts.

    Raises ``ValueError`` on a group holding more digits than it may (corrupt bytes).
    """
    size = decimal_size_checked(precision, scale)
    i0, ix = divmod(precision - scale, 9)
    f0, fx = divmod(scale, 9)
    top = 1 << (size * 8 - 1)
    mask = (1 << (size * 8)) - 1
    # Groups from the least significant end: (bit mask, bits, digit limit, decimal weight).
    # The fraction comes first, so the groups compose one integer N = whole * 10**scale + frac.
    layout: list[tuple[int, int]] = []  # (bits, digits)
    if fx:
        layout.append((_DIG2BYTES[fx] * 8, fx))
    layout.extend([(32, 9)] * (f0 + i0))
    if ix:
        layout.append((_DIG2BYTES[ix] * 8, ix))
    groups = []
    weight = 1
    for bits, digits in layout:
        groups.append(((1 << bits) - 1, bits, _POW10[digits], weight))
        weight *= _POW10[digits]
    from_bytes = int.from_bytes

    def decode(buf: bytes, offset: int) -> Decimal:
        raw = from_bytes(buf[offset:offset + size], "big")
        if raw & top:
            v = raw ^ top
            sign = ""
        else:
            v = raw ^ mask ^ top
            sign = "-"
        n = 0
        for gmask, bits, limit, w in groups:
            g = v & gmask
            if g >= limit:
                raise ValueError("DECIMAL group out of range")
            n += g * w
            v >>= bits
        if scale:
            text = str(n).rjust(scale + 1, "0")
            return Decimal(f"{sign}{text[:-scale]}.{text[-scale:]}")
        return Decimal(f"{sign}{n}")

    return size, decode


_DECIMAL_CACHE: dict[tuple[int, int], tuple[int, Any]] = {}


def decode_decimal(buf: bytes, offset: int, precision: int, scale: int) -> tuple[Decimal, int]:
    """Decode one DECIMAL at ``offset``; returns ``(value, size)``. Slow path (cached decoder)."""
    entry = _DECIMAL_CACHE.get((precision, scale))
    if entry is None:
        entry = _DECIMAL_CACHE[(precision, scale)] = decimal_decoder(precision, scale)
    size, decode = entry
    if offset + size > len(buf):
        raise ValueError("DECIMAL runs past the end of the value")
    return decode(buf, offset), size


# --- temporal ----------------------------------------------------------------------------------


def fractional_size(fsp: int) -> int:
    """Bytes of the fractional part of a TIME2/DATETIME2/TIMESTAMP2 with ``fsp`` digits."""
    return (fsp + 1) // 2


def _frac_text(us: int, fsp: int) -> str:
    return f".{us:06d}"[: fsp + 1] if fsp else ""


def decode_date(v: int) -> datetime.date | InvalidTemporal:
    """DATE (3 bytes, already read as a little-endian int): ``year<<9 | month<<5 | day``."""
    day = v & 31
    month = (v >> 5) & 15
    year = v >> 9
    try:
        return datetime.date(year, month, day)
    except ValueError:
        return InvalidTemporal(f"{year:04d}-{month:02d}-{day:02d}")


def _read_frac(buf: bytes, offset: int, fsp: int) -> int:
    """The fractional part (microseconds) stored big-endian after DATETIME2/TIMESTAMP2."""
    if fsp <= 2:
        return buf[offset] * 10000 if fsp else 0
    if fsp <= 4:
        return ((buf[offset] << 8) | buf[offset + 1]) * 100
    return (buf[offset] << 16) | (buf[offset + 1] << 8) | buf[offset + 2]


def decode_datetime2(buf: bytes, offset: int, fsp: int) -> datetime.datetime | InvalidTemporal:
    """DATETIME2: 5 bytes big-endian, offset by 2^39, then the fraction."""
    packed = int.from_bytes(buf[offset:offset + 5], "big") - 0x8000000000
    us = _read_frac(buf, offset + 5, fsp)
    if packed < 0 or us > 999999:
        raise ValueError("negative or out-of-range DATETIME2")
    ymd = packed >> 17
    hms = packed & 0x1FFFF
    ym = ymd >> 5
    year, month = divmod(ym, 13)
    day = ymd & 31
    hour, minute, second = hms >> 12, (hms >> 6) & 63, hms & 63
    try:
        return datetime.datetime(year, month, day, hour, minute, second, us)
    except ValueError:
        return datetime2_invalid(packed, us, fsp)


def datetime2_invalid(packed: int, us: int, fsp: int) -> InvalidTemporal:
    """The InvalidTemporal of a DATETIME2 whose parts Python cannot hold (zero or invalid
    date, impossible time): the text SELECT prints, from the packed value less its 2^39 bias."""
    ymd = packed >> 17
    year, month = divmod(ymd >> 5, 13)
    hms = packed & 0x1FFFF
    return InvalidTemporal(f"{year:04d}-{month:02d}-{ymd & 31:02d} {hms >> 12:02d}:"
                           f"{(hms >> 6) & 63:02d}:{hms & 63:02d}{_frac_text(us, fsp)}")


def decode_timestamp2(buf: bytes, offset: int, fsp: int) -> datetime.datetime | InvalidTemporal:
    """TIMESTAMP2: seconds since the epoch, 4 bytes big-endian, then the fraction. 0 = zero date."""
    seconds = int.from_bytes(buf[offset:offset + 4], "big")
    us = _read_frac(buf, offset + 4, fsp)
    if us > 999999:
        raise ValueError("TIMESTAMP2 fraction out of range")
    if seconds == 0 and us == 0:
        return InvalidTemporal("0000-00-00 00:00:00" + _frac_text(0, fsp))
    return _EPOCH + datetime.timedelta(0, seconds, us)


def decode_timestamp_old(seconds: int) -> datetime.datetime | InvalidTemporal:
    """Old TIMESTAMP (type 7): 4-byte little-endian seconds since the epoch; 0 = zero date."""
    if seconds == 0:
        return InvalidTemporal("0000-00-00 00:00:00")
    return _EPOCH + datetime.timedelta(seconds=seconds)


def _time_from_packed(packed: int) -> datetime.timedelta:
    """TIME from MySQL's packed 64-bit form: ``(hms << 24) + microseconds``, signed."""
    negative = packed < 0
    if negative:
        packed = -packed
    hms, us = packed >> 24, packed & 0xFFFFFF
    hour, minute, second = (hms >> 12) & 0x3FF, (hms >> 6) & 63, hms & 63
    if minute > 59 or second > 59 or us > 999999:
        raise ValueError("impossible TIME")
    delta = datetime.timedelta(0, hour * 3600 + minute * 60 + second, us)  # positional: fast
    return -delta if negative else delta


def decode_time2(buf: bytes, offset: int, fsp: int) -> datetime.timedelta:
    """TIME2: 3 bytes big-endian offset by 2^23 (``hour<<12|minute<<6|second``), then the fraction.

    For negative values the fraction is stored as a negative number too, so a borrow from the
    integer part has to be undone (what the server's own reader does).
    """
    intpart = int.from_bytes(buf[offset:offset + 3], "big") - 0x800000
    if fsp == 0:
        return _time_from_packed(intpart << 24)
    if fsp <= 2:
        frac = buf[offset + 3]
        if intpart < 0 and frac:
            intpart += 1
            frac -= 0x100
        return _time_from_packed((intpart << 24) + frac * 10000)
    if fsp <= 4:
        frac = int.from_bytes(buf[offset + 3:offset + 5], "big")
        if intpart < 0 and frac:
            intpart += 1
            frac -= 0x10000
        return _time_from_packed((intpart << 24) + frac * 100)
    return _time_from_packed(int.from_bytes(buf[offset:offset + 6], "big") - 0x800000000000)


def decode_time_old(v: int) -> datetime.timedelta:
    """Old TIME (type 11): signed 3-byte int ``±HHMMSS``."""
    negative = v < 0
    v = -v if negative else v
    hours, rest = divmod(v, 10000)
    minutes, seconds = divmod(rest, 100)
    if minutes > 59 or seconds > 59:
        raise ValueError("impossible TIME")
    delta = datetime.timedelta(hours=hours, minutes=minutes, seconds=seconds)
    return -delta if negative else delta


def decode_datetime_old(v: int) -> datetime.datetime | InvalidTemporal:
    """Old DATETIME (type 12): 8-byte int ``YYYYMMDDhhmmss``."""
    date, time = divmod(v, 1000000)
    year, md = divmod(date, 10000)
    month, day = divmod(md, 100)
    hour, ms = divmod(time, 10000)
    minute, second = divmod(ms, 100)
    try:
        return datetime.datetime(year, month, day, hour, minute, second)
    except ValueError:
        return InvalidTemporal(f"{year:04d}-{month:02d}-{day:02d} {hour:02d}:{minute:02d}:{second:02d}")


# --- character data ------------------------------------------------------------------------------

# MySQL's latin1 is Windows-1252, except that the five bytes cp1252 leaves undefined map to the
# C1 controls of the same number; Python's cp1252 codec rejects those, so decode as ISO-8859-1
# (every byte → U+00XX) and translate 0x80–0x9F to what cp1252 defines.
_CP1252_HIGH = {
    i: ord(bytes([i]).decode("cp1252")) for i in range(0x80, 0xA0)
    if i not in (0x81, 0x8D, 0x8F, 0x90, 0x9D)
}


def decode_mysql_latin1(data: bytes) -> str:
    """Decode MySQL/MariaDB ``latin1`` (cp1252 with the C1 holes filled)."""
    return data.decode("latin-1").translate(_CP1252_HIGH)


# --- MariaDB UUID / INET4 / INET6 ----------------------------------------------------------------


def mariadb_uuid_text(stored: bytes) -> str:
    """The text of a MariaDB UUID from the 16 bytes its row image carries.

    MariaDB writes UUID (and INET4/INET6) columns into the binlog as binary STRING columns of
    16 (4) bytes with collation 63 and no optional metadata that tells them from BINARY(16)
    (checked on 10.11 and 11.8), so the row decoder returns ``bytes``; the row image holds the
    UUID in text order (the index-friendly swap of the storage engine is not applied to it).
    This helper is for callers that know the column type from the schema (DDL or
    information_schema).
    """
    if len(stored) != 16:
        raise ValueError("a UUID is 16 bytes")
    h = stored.hex()
    return f"{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def inet4_text(stored: bytes) -> str:
    """The dotted-quad text of a MariaDB INET4 (4 bytes, network order)."""
    if len(stored) != 4:
        raise ValueError("an INET4 is 4 bytes")
    return ".".join(str(b) for b in stored)


def inet6_text(stored: bytes) -> str:
    """The text of a MariaDB INET6 (16 bytes, network order), as MariaDB prints it."""
    import ipaddress

    if len(stored) != 16:
        raise ValueError("an INET6 is 16 bytes")
    addr = ipaddress.IPv6Address(stored)
    if addr.ipv4_mapped is not None:
        return f"::ffff:{addr.ipv4_mapped}"
    return str(addr)


# --- MySQL binary JSON ---------------------------------------------------------------------------

_JSONB_SMALL_OBJECT, _JSONB_LARGE_OBJECT = 0x0, 0x1
_JSONB_SMALL_ARRAY, _JSONB_LARGE_ARRAY = 0x2, 0x3
_JSONB_LITERAL = 0x4
_JSONB_INT16, _JSONB_UINT16, _JSONB_INT32, _JSONB_UINT32 = 0x5, 0x6, 0x7, 0x8
_JSONB_INT64, _JSONB_UINT64, _JSONB_DOUBLE = 0x9, 0xA, 0xB
_JSONB_STRING, _JSONB_OPAQUE = 0xC, 0xF

_S_I16 = struct.Struct("<h")
_S_U16 = struct.Struct("<H")
_S_I32 = struct.Struct("<i")
_S_U32 = struct.Struct("<I")
_S_I64 = struct.Struct("<q")
_S_U64 = struct.Struct("<Q")
_S_F64 = struct.Struct("<d")

_SCALARS = {
    _JSONB_INT16: _S_I16, _JSONB_UINT16: _S_U16, _JSONB_INT32: _S_I32, _JSONB_UINT32: _S_U32,
    _JSONB_INT64: _S_I64, _JSONB_UINT64: _S_U64, _JSONB_DOUBLE: _S_F64,
}


@dataclass(frozen=True, slots=True)
class _Opaque:
    """A JSON opaque value (DECIMAL, temporal, binary…), kept as its ready JSON text."""

    text: str


def _varlen(buf: bytes, offset: int, end: int) -> tuple[int, int]:
    """MySQL JSON variable-length integer: 7 bits per byte, least significant first."""
    value = 0
    shift = 0
    while True:
        if offset >= end or shift > 28:
            raise ValueError("bad JSON length")
        b = buf[offset]
        offset += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, offset
        shift += 7


def _opaque_text(field_type: int, data: bytes) -> str:
    if field_type == 246:  # NEWDECIMAL: precision, scale, decimal bytes
        value, _ = decode_decimal(data, 2, data[0], data[1])
        return format(value, "f")
    if field_type in (7, 10, 12, 11) and len(data) >= 8:
        packed = _S_I64.unpack_from(data, 0)[0]
        if field_type == 11:
            t = _time_from_packed(packed)
            return json.dumps(time_text(t, 6))
        negative = packed < 0
        packed = -packed if negative else packed
        intpart, us = packed >> 24, packed & 0xFFFFFF
        ymd, hms = intpart >> 17, intpart & 0x1FFFF
        year, month = divmod(ymd >> 5, 13)
        day = ymd & 31
        if field_type == 10:
            return f'"{year:04d}-{month:02d}-{day:02d}"'
        return (f'"{year:04d}-{month:02d}-{day:02d} {hms >> 12:02d}:{(hms >> 6) & 63:02d}:'
                f'{hms & 63:02d}.{us:06d}"')
    return f'"base64:type{field_type}:{base64.b64encode(data).decode("ascii")}"'


def time_text(t: datetime.timedelta, fsp: int | None = None) -> str:
    """A TIME value as the server prints it, ``[-]HH:MM:SS`` (hours past 24 up to 838), then the
    fraction: exactly ``fsp`` digits when given (a TIME(fsp) column), else six digits when there
    are microseconds and none when there are not. The one TIME formatter of the project."""
    total_us = t.days * 86400_000000 + t.seconds * 1000000 + t.microseconds
    sign = "-" if total_us < 0 else ""
    seconds, us = divmod(abs(total_us), 1000000)
    minutes, second = divmod(seconds, 60)
    hour, minute = divmod(minutes, 60)
    fraction = _frac_text(us, fsp) if fsp is not None else f".{us:06d}" if us else ""
    return f"{sign}{hour:02d}:{minute:02d}:{second:02d}{fraction}"


def _jsonb_value(buf: bytes, type_byte: int, offset: int, end: int) -> Any:
    """Decode the value of JSON type ``type_byte`` whose data starts at ``offset``."""
    if type_byte in (_JSONB_SMALL_OBJECT, _JSONB_LARGE_OBJECT, _JSONB_SMALL_ARRAY,
                     _JSONB_LARGE_ARRAY):
        return _jsonb_container(buf, type_byte, offset, end)
    if type_byte == _JSONB_LITERAL:
        return _literal(buf[offset])
    scalar = _SCALARS.get(type_byte)
    if scalar is not None:
        if offset + scalar.size > end:
            raise ValueError("JSON scalar runs past its container")
        return scalar.unpack_from(buf, offset)[0]
    if type_byte == _JSONB_STRING:
        length, offset = _varlen(buf, offset, end)
        if offset + length > end:
            raise ValueError("JSON string runs past its container")
        return buf[offset:offset + length].decode("utf-8")
    if type_byte == _JSONB_OPAQUE:
        field_type = buf[offset]
        length, offset = _varlen(buf, offset + 1, end)
        if offset + length > end:
            raise ValueError("JSON opaque value runs past its container")
        return _Opaque(_opaque_text(field_type, buf[offset:offset + length]))
    raise ValueError(f"unknown JSON value type {type_byte:#x}")


def _literal(b: int) -> Any:
    if b == 0:
        return None
    if b == 1:
        return True
    if b == 2:
        return False
    raise ValueError(f"unknown JSON literal {b}")


def _jsonb_container(buf: bytes, type_byte: int, base: int, end: int) -> Any:
    large = type_byte in (_JSONB_LARGE_OBJECT, _JSONB_LARGE_ARRAY)
    is_object = type_byte in (_JSONB_SMALL_OBJECT, _JSONB_LARGE_OBJECT)
    word = _S_U32 if large else _S_U16
    w = word.size
    if base + 2 * w > end:
        raise ValueError("JSON container header runs past the value")
    count = word.unpack_from(buf, base)[0]
    size = word.unpack_from(buf, base + w)[0]
    cend = base + size
    if cend > end:
        raise ValueError("JSON container larger than its value")
    pos = base + 2 * w
    keys: list[str] = []
    if is_object:
        for _ in range(count):
            if pos + w + 2 > cend:
                raise ValueError("JSON key entry runs past the container")
            key_off = word.unpack_from(buf, pos)[0]
            key_len = _S_U16.unpack_from(buf, pos + w)[0]
            pos += w + 2
            if base + key_off + key_len > cend:
                raise ValueError("JSON key runs past the container")
            keys.append(buf[base + key_off:base + key_off + key_len].decode("utf-8"))
    values: list[Any] = []
    for _ in range(count):
        if pos + 1 + w > cend:
            raise ValueError("JSON value entry runs past the container")
        t = buf[pos]
        if t == _JSONB_LITERAL:
            values.append(_literal(buf[pos + 1]))
        elif t in (_JSONB_INT16, _JSONB_UINT16) or (large and t in (_JSONB_INT32, _JSONB_UINT32)):
            values.append(_SCALARS[t].unpack_from(buf, pos + 1)[0])
        else:
            value_off = word.unpack_from(buf, pos + 1)[0]
            if base + value_off >= cend:
                raise ValueError("JSON value offset past the container")
            values.append(_jsonb_value(buf, t, base + value_off, cend))
        pos += 1 + w
    if is_object:
        return dict(zip(keys, values, strict=True))
    return values


def json_binary_to_python(data: bytes) -> Any:
    """Decode MySQL binary JSON into Python values (dict/list/str/int/float/bool/None).

    Opaque values (DECIMAL, dates, binary strings inside JSON) become private ``_Opaque``
    objects holding their JSON text; :func:`json_to_text` prints them. An empty value is JSON
    ``null`` (what the server reads it as).

    Raises:
        ValueError: malformed binary JSON (also ``IndexError``/``struct.error`` on truncation;
            the row decoder turns all of them into ``RowDecodeError``).
    """
    if not data:
        return None
    return _jsonb_value(data, data[0], 1, len(data))


def mysql_double_text(x: float) -> str:
    """A double as MySQL prints it (``my_gcvt`` with its widest field width), without ``.0``."""
    if x != x or x in (float("inf"), float("-inf")):
        raise ValueError("JSON cannot hold NaN or infinity")
    if x == 0:
        return "-0" if str(x).startswith("-") else "0"
    sign = "-" if x < 0 else ""
    _, digits_t, exponent = Decimal(repr(abs(x))).normalize().as_tuple()
    digits = "".join(map(str, digits_t))
    assert isinstance(exponent, int)
    n = len(digits)
    decpt = n + exponent  # position of the decimal point relative to the digits
    width = 34 - (1 if sign else 0)
    if decpt <= 0:
        flen = n - decpt + 2
    elif decpt < n:
        flen = n + 1
    else:
        flen = decpt
    if flen <= width and -14 <= decpt and (decpt <= 15 or n > decpt):
        if decpt <= 0:
            return f"{sign}0.{'0' * -decpt}{digits}"
        if decpt < n:
            return f"{sign}{digits[:decpt]}.{digits[decpt:]}"
        return f"{sign}{digits}{'0' * (decpt - n)}"
    e = decpt - 1
    mantissa = digits[0] + ("." + digits[1:] if n > 1 else "")
    return f"{sign}{mantissa}e{e}"


def _mysql_key_order(item: tuple[str, Any]) -> tuple[int, bytes]:
    key = item[0].encode("utf-8")
    return len(key), key


def json_to_text(value: Any) -> str:
    """JSON text as MySQL prints it: ``{"a": 1, "b": [true, null]}``, keys in MySQL's order
    (shorter keys first, then bytewise), doubles with a decimal point or exponent."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        text = mysql_double_text(value)
        if all(c == "-" or c.isdigit() for c in text):
            text += ".0"
        return text
    if isinstance(value, dict):
        items = sorted(value.items(), key=_mysql_key_order)
        return "{" + ", ".join(f"{json.dumps(k, ensure_ascii=False)}: {json_to_text(v)}"
                               for k, v in items) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(json_to_text(v) for v in value) + "]"
    if isinstance(value, _Opaque):
        return value.text
    raise TypeError(f"not a JSON value: {type(value).__name__}")


def json_binary_to_text(data: bytes) -> str:
    """MySQL binary JSON → JSON text as ``SELECT`` prints it."""
    return json_to_text(json_binary_to_python(data))


# --- PARTIAL_UPDATE_ROWS JSON diffs --------------------------------------------------------------


class JsonDiffOp:
    REPLACE = 0
    INSERT = 1
    REMOVE = 2


JSON_DIFF_OP_NAMES = ("REPLACE", "INSERT", "REMOVE")  # by JsonDiffOp value


@dataclass(frozen=True, slots=True)
class JsonDiff:
    """The JSON diff vector of a partially updated JSON column, surfaced as is.

    Used as the after value when the before image does not carry the column (MINIMAL image), so
    the full after value cannot be computed. ``ops`` are ``(op, path, value_json_text|None)``.
    """

    ops: tuple[tuple[int, str, str | None], ...]

    def to_json_text(self) -> str:
        """The operations as JSON text, the form every output keeps them in:
        ``[{"op": "REPLACE", "path": "$.a", "value": 2}, {"op": "REMOVE", "path": "$.b"}]`` —
        ``op`` is REPLACE, INSERT or REMOVE, ``value`` the JSON value exactly as MySQL prints it
        (absent for REMOVE). Applying them in order to the previous document gives the new one
        (JSON_REPLACE / JSON_ARRAY_INSERT-or-JSON_INSERT / JSON_REMOVE semantics)."""
        parts = []
        for op, path, value in self.ops:
            name = JSON_DIFF_OP_NAMES[op] if 0 <= op < len(JSON_DIFF_OP_NAMES) else str(op)
            text = f'{{"op": "{name}", "path": {json.dumps(path, ensure_ascii=False)}'
            parts.append(text + ("}" if value is None else f', "value": {value}}}'))
        return "[" + ", ".join(parts) + "]"


def _parse_path(path: str) -> list[str | int]:
    """Parse the simple JSON paths the server writes into diffs: ``$``, ``.key``, ``."key"``,
    ``[n]``."""
    if not path.startswith("$"):
        raise ValueError(f"JSON path must start with $: {path!r}")
    legs: list[str | int] = []
    i = 1
    n = len(path)
    while i < n:
        c = path[i]
        if c == ".":
            i += 1
            if i < n and path[i] == '"':
                j = i + 1
                while j < n and path[j] != '"':
                    j += 2 if path[j] == "\\" else 1
                legs.append(json.loads(path[i:j + 1]))
                i = j + 1
            else:
                j = i
                while j < n and path[j] not in ".[":
                    j += 1
                legs.append(path[i:j])
                i = j
        elif c == "[":
            j = path.index("]", i)
            legs.append(int(path[i + 1:j].strip()))
            i = j + 1
        elif c.isspace():
            i += 1
        else:
            raise ValueError(f"unsupported JSON path {path!r}")
    return legs


def apply_json_diff_text(document: str, operations: str) -> str:
    """Apply a :meth:`JsonDiff.to_json_text` operations text to a JSON document's text (as MySQL
    prints it) and return the new document's text, as MySQL prints it: what a reader of the
    lake does with a ``_json_diff`` (``sinks.spark.state``)."""
    ops = [(JSON_DIFF_OP_NAMES.index(o["op"]), o["path"], o.get("value"))
           for o in json.loads(operations)]
    return json_to_text(apply_json_diff(json.loads(document), ops))


def apply_json_diff(before: Any, ops: list[tuple[int, str, Any]]) -> Any:
    """Apply a JSON diff vector (``(op, path, python_value)``) to a decoded JSON document.

    Mirrors the server: REPLACE sets an existing member/element, INSERT adds an object member or
    inserts into an array (appending past the end), REMOVE deletes. Raises ``ValueError`` if a
    path does not resolve.
    """
    import copy

    doc = copy.deepcopy(before)
    for op, path, value in ops:
        legs = _parse_path(path)
        if not legs:
            if op != JsonDiffOp.REPLACE:
                raise ValueError("only REPLACE may target the document root")
            doc = value
            continue
        parent = doc
        for leg in legs[:-1]:
            parent = parent[leg]
        last = legs[-1]
        if op == JsonDiffOp.REPLACE:
            parent[last] = value
        elif op == JsonDiffOp.INSERT:
            if isinstance(parent, list):
                assert isinstance(last, int)
                parent.insert(min(last, len(parent)), value)
            else:
                parent[last] = value
        elif op == JsonDiffOp.REMOVE:
            del parent[last]
        else:
            raise ValueError(f"unknown JSON diff operation {op}")
    return doc
