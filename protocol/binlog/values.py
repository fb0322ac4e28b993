"""The row decoder's value functions in one import, and DATE/DATETIME/UUID/INET4/INET6.

The types that have no module of their own: DATE, DATETIME2 and the old DATETIME, MariaDB's
UUID/INET4/INET6.

TIMESTAMP, TIME, DECIMAL, MySQL JSON and character data each have one description in
``protocol.valuetypes`` (decoding, a snapshot's text, printing); the names below that belong to
them are that description's functions, re-exported so that the row decoder's generated code and
its callers keep one import.

DATE → :class:`datetime.date`, DATETIME → naive :class:`datetime.datetime`; a date Python cannot
hold is an :class:`InvalidTemporal` (``protocol.valuetypes.temporal``).

The functions take ``(buf, offset)`` over a ``bytes`` object and rely on the caller to catch
``IndexError``/``ValueError``/``struct.error`` and report a :class:`~protocol.errors.RowDecodeError`
with the table and column — they are called on the hot path and carry no try blocks themselves.
"""

from __future__ import annotations

import datetime

from ..valuetypes import newdecimal, time2, timestamp2
from ..valuetypes.binary_json import (
    JSON_DIFF_OP_NAMES,
    JsonDiff,
    JsonDiffOp,
    Opaque,
    apply_json_diff,
    apply_json_diff_text,
    json_binary_to_python,
    json_binary_to_text,
    json_to_text,
    mysql_double_text,
)
from ..valuetypes.characters import decode_mysql_latin1
from ..valuetypes.temporal import InvalidTemporal, fraction_text, fractional_size, read_fraction

__all__ = [
    "InvalidTemporal", "JsonDiff", "JsonDiffOp", "JSON_DIFF_OP_NAMES", "Opaque", "decimal_size",
    "decimal_size_checked", "decimal_groups", "decimal_decoder", "datetime2_invalid",
    "decode_decimal", "decode_date", "decode_datetime2", "decode_timestamp2", "decode_time2",
    "decode_time_old", "decode_timestamp_old", "decode_datetime_old", "fractional_size",
    "json_binary_to_text", "json_binary_to_python", "json_to_text", "mysql_double_text",
    "apply_json_diff", "apply_json_diff_text", "mariadb_uuid_text", "inet4_text", "inet6_text",
    "decode_mysql_latin1", "time_text",
]

decimal_size = newdecimal.size
decimal_size_checked = newdecimal.size_checked
decimal_groups = newdecimal.groups
decimal_decoder = newdecimal.decoder
decode_decimal = newdecimal.decode
decode_timestamp2 = timestamp2.decode
decode_timestamp_old = timestamp2.decode_old
decode_time2 = time2.decode
decode_time_old = time2.decode_old
time_text = time2.text


# --- temporal ----------------------------------------------------------------------------------


def decode_date(v: int) -> datetime.date | InvalidTemporal:
    """DATE (3 bytes, already read as a little-endian int): ``year<<9 | month<<5 | day``."""
    day = v & 31
    month = (v >> 5) & 15
    year = v >> 9
    try:
        return datetime.date(year, month, day)
    except ValueError:
        return InvalidTemporal(f"{year:04d}-{month:02d}-{day:02d}")


def decode_datetime2(buf: bytes, offset: int, fsp: int) -> datetime.datetime | InvalidTemporal:
    """DATETIME2: 5 bytes big-endian, offset by 2^39, then the fraction."""
    packed = int.from_bytes(buf[offset:offset + 5], "big") - 0x8000000000
    us = read_fraction(buf, offset + 5, fsp)
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
                           f"{(hms >> 6) & 63:02d}:{hms & 63:02d}{fraction_text(us, fsp)}")


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


