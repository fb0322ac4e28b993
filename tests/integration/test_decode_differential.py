"""Differential check of ROW VALUES against the servers' own decoders.

For each flavor a mixed-type workload (integers signed and unsigned at their limits, DECIMALs,
FLOAT/DOUBLE, every temporal type with fractions and zero/invalid dates, strings in utf8mb4,
utf8mb3, latin1 and binary, BLOBs with 0x00 bytes, ENUM/SET, BIT, JSON, NULLs) is written by
INSERT, UPDATE and DELETE. The same closed binlog file is then decoded twice:

- by the flavor's own tool, ``mariadb-binlog --verbose --base64-output=decode-rows`` (10.11,
  11.8) or ``mysqlbinlog -v --base64-output=decode-rows`` (9.7), whose ``### INSERT INTO …`` /
  ``### UPDATE … ### WHERE … ### SET …`` / ``### DELETE FROM … ### WHERE …`` blocks list each
  image as ``###   @N=value`` lines (N = 1-based column number of the table);
- by binlake (file reader + EventStream + row decoders, CRC32 verified).

Every row image of the workload's schema must agree, column by column and in order. binlake's
value is rendered into the text the tool prints, and the two strings must be *equal*
(:func:`printed_form`); the rules, all read off the tools' output on these servers:

===========================  ===========================================================
our value (column type)      what the tool prints
===========================  ===========================================================
None                         ``NULL``
int (TINY…LONGLONG)          the signed reading; when that is negative, the unsigned reading
                             follows in parentheses: ``-1 (255)`` (so an UNSIGNED 255 and a
                             signed -1 print alike; the column's signedness picks our side)
int (YEAR)                   stored byte + 1900 (YEAR 0000 prints ``1900``; ours is 0)
int (BIT(n))                 ``b'…'`` with n binary digits
str (ENUM)                   the 1-based index of the label (0 for the empty string)
str (SET)                    ``b'…'`` the member bitmask, 8 digits per stored byte
Decimal                      ``format(value, 'f')`` (all ``scale`` digits kept)
float (FLOAT)                C ``%-20g`` (padded to 20 characters)
float (DOUBLE)               C ``%.20g``
date (DATE)                  ``'YYYY:MM:DD'`` — colons; an InvalidTemporal's text likewise
datetime (DATETIME(n))       ``'YYYY-MM-DD hh:mm:ss[.f…]'`` with n fraction digits;
                             InvalidTemporal: its text (the same form)
datetime (TIMESTAMP(n))      seconds since the epoch, ``.`` and n fraction digits when n > 0
                             (no quotes); the zero TIMESTAMP (InvalidTemporal) prints ``0``
timedelta (TIME(n))          ``'[-]hh:mm:ss[.f…]'`` with n fraction digits
str / bytes (strings, BLOB,  the stored bytes (str encoded back with the column's charset,
JSON text on MariaDB,        MariaDB latin1 = cp1252 with C1 holes), quoted: MariaDB prints a
GEOMETRY)                    byte < 0x20 as ``\\xNN`` and every other byte as is; MySQL prints
                             ``\\b \\t \\n \\f \\r \\' \\\\`` for those bytes, ``\\xNN`` for the
                             rest below 0x20, and the others as is. BINARY(n): the image holds
                             the value without its trailing 0x00 pad (ours has it back), so
                             the pad is stripped before quoting.
str (MySQL JSON)             our JSON text (what SELECT prints), quoted as above
(MySQL GEOMETRY)             not compared: mysqlbinlog 9.7 prints ``!! Don't know how to
                             handle column type=255`` and drops the rest of the row change,
                             so GEOMETRY (and MariaDB's UUID/INET4/INET6, binary strings in
                             the image) are in a MariaDB-only table
===========================  ===========================================================

The tools print raw bytes (latin1 columns as latin1, utf8mb4 as UTF-8), so their output is read
as latin-1 text (one character per byte) and our rendering is built the same way.
"""

from __future__ import annotations

import datetime
import decimal
import re
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from protocol.binlog.coltypes import FieldType as T
from protocol.binlog.coltypes import codec_for_collation
from protocol.binlog.filereader import split_binlog
from protocol.binlog.model import Column, RowsEvent, RowsKind
from protocol.binlog.stream import EventStream
from protocol.binlog.values import InvalidTemporal
from protocol.valuetypes.characters import _CP1252_HIGH
from tests.servers.handle import ServerHandle

pytestmark = pytest.mark.server

FLAVOR_FIXTURES = ["mariadb_10_11", "mariadb_11_8", "mysql_9_7"]
UTF8 = ["--default-character-set=utf8mb4"]
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)

ALL_BYTES = "0x" + bytes(range(256)).hex()

WORKLOAD = f"""
SET SESSION sql_mode=''; SET SESSION time_zone='+00:00';
CREATE TABLE t (id INT PRIMARY KEY,
  ti TINYINT, tu TINYINT UNSIGNED, si SMALLINT, su SMALLINT UNSIGNED, mi MEDIUMINT,
  mu MEDIUMINT UNSIGNED, i INT, iu INT UNSIGNED, bi BIGINT, bu BIGINT UNSIGNED,
  d1 DECIMAL(12,2), d2 DECIMAL(65,30), d0 DECIMAL(10,0) UNSIGNED, d5 DECIMAL(5,5),
  f FLOAT, dd DOUBLE, y YEAR, bt BIT(10), b64 BIT(64), b1 BIT(1),
  da DATE, dt DATETIME, dt3 DATETIME(3), dt6 DATETIME(6), ts TIMESTAMP NULL,
  ts3 TIMESTAMP(3) NULL, ts6 TIMESTAMP(6) NULL, tm TIME, tm2 TIME(2), tm6 TIME(6),
  c CHAR(5), v VARCHAR(300) CHARACTER SET utf8mb4, m3 VARCHAR(20) CHARACTER SET utf8mb3,
  l VARCHAR(10) CHARACTER SET latin1, lt TEXT CHARACTER SET latin1, bn BINARY(4),
  vb VARBINARY(300), tx TEXT CHARACTER SET utf8mb4, bl BLOB, lb LONGBLOB,
  e ENUM('a','b','c'), s SET('x','y','z'), j JSON);
INSERT INTO t VALUES (1,
  -128, 255, -32768, 65535, -8388608, 16777215, -2147483648, 4294967295,
  -9223372036854775808, 18446744073709551615,
  -1234567890.12, '-12345678901234567890123456789012345.123456789012345678901234567890',
  9999999999, -0.00001,
  3.14, -2.2250738585072014e-308, 2155, b'1010101010', 0xFFFFFFFFFFFFFFFF, 1,
  '2024-02-29', '9999-12-31 23:59:59', '2024-02-29 12:34:56.789', '1000-01-01 00:00:00.000001',
  '2038-01-19 03:14:07', '2038-01-19 03:14:07.123', '1970-01-01 00:00:01.000001',
  '-838:59:59', '-00:00:00.1', '-00:00:00.000001',
  'ab', 'h''é😀\\n\\\\x\\t\\r\\b', 'mb3 é', 'àé€', 'ç\\0x', 0x6100, {ALL_BYTES},
  'text 😀', '\\0\\1bl', REPEAT(0x00, 5), 'b', 'x,z',
  '{{"b": [1, 2.5, null, true, "s\\\\"q"], "a": {{"x": -1}}, "long key": 1e100}}');
INSERT INTO t (id) VALUES (2);
INSERT INTO t VALUES (3,
  127, 0, 32767, 0, 8388607, 0, 2147483647, 0, 9223372036854775807, 0,
  0.01, '99999999999999999999999999999999999.999999999999999999999999999999', 0, 0.99999,
  1e30, 0.1, 0, 0, 0, 0,
  '0000-00-00', '0000-00-00 00:00:00', '2024-00-10 00:00:00.5', '2024-02-29 23:59:59.999999',
  '0000-00-00 00:00:00', '0000-00-00 00:00:00', '2001-02-03 04:05:06',
  '838:59:59', '-12:34:56.5', '12:00:00.000001',
  '', '', '', '', '', 0x00000000, '', '', '', '', '', '', '[]');
UPDATE t SET ti=-1, bu=18446744073709551614, v='upd', y=1901, s='', e='',
  tm6='-00:00:01.5', d1=-0.5 WHERE id=1;
UPDATE t SET da='2024-02-30', f=-1.5e-10, dd=1e300 WHERE id=3;
DELETE FROM t WHERE id=2;
"""

# mysqlbinlog 9.7 cannot print GEOMETRY ("!! Don't know how to handle column type=255") and then
# drops the rest of the row change, so these MariaDB types get a table of their own there.
WORKLOAD_MARIADB = """
CREATE TABLE x (id INT PRIMARY KEY, g GEOMETRY, u UUID, i4 INET4, i6 INET6);
INSERT INTO x VALUES (1, ST_GeomFromText('POINT(1 2)'), '123e4567-e89b-12d3-a456-426655440000',
  '10.0.0.1', '::ffff:1.2.3.4'), (2, NULL, NULL, NULL, NULL);
UPDATE x SET g = ST_GeomFromText('LINESTRING(0 0, 1 1)'), i6 = '2001:db8::1' WHERE id = 1;
"""


# --- the tool's side ------------------------------------------------------------------------------


@dataclass
class PrintedRow:
    """One row change as the tool prints it: images map column number (0-based) → text."""

    kind: RowsKind
    table: str  # `schema`.`table` as printed
    before: dict[int, str] | None
    after: dict[int, str] | None


_ROW_START = re.compile(r"^### (INSERT INTO|UPDATE|DELETE FROM) (`.*`\.`.*`)$")
_VALUE = re.compile(r"^###   @(\d+)=(.*)$")
_KINDS = {"INSERT INTO": RowsKind.INSERT, "UPDATE": RowsKind.UPDATE,
          "DELETE FROM": RowsKind.DELETE}


def parse_verbose_rows(text: str) -> list[PrintedRow]:
    """The ``###`` row blocks of ``mariadb-binlog -v`` / ``mysqlbinlog -v`` output, in order.

    An INSERT lists its image after ``### SET``, a DELETE after ``### WHERE``, an UPDATE its
    before image after ``### WHERE`` and its after image after ``### SET``. Values are one line
    each (both tools escape line breaks); the text is taken verbatim up to the end of the line.
    """
    rows: list[PrintedRow] = []
    current: PrintedRow | None = None
    image: dict[int, str] | None = None
    for line in text.split("\n"):
        if not line.startswith("###"):
            current = image = None
            continue
        if m := _ROW_START.match(line):
            current = PrintedRow(_KINDS[m.group(1)], m.group(2), None, None)
            rows.append(current)
            image = None
        elif line == "### WHERE":
            assert current is not None, line
            image = current.before = {}
        elif line == "### SET":
            assert current is not None, line
            image = current.after = {}
        elif m := _VALUE.match(line):
            assert image is not None, line
            image[int(m.group(1)) - 1] = m.group(2)
        else:
            raise AssertionError(f"unexpected row line in the tool's output: {line!r}")
    return rows


def tool_rows(server: ServerHandle, path: str) -> list[PrintedRow]:
    flags = ["--verbose"] if server.is_mariadb else ["-v"]
    result = subprocess.run(
        server.binlog_tool_argv(*flags, "--base64-output=decode-rows", path),
        capture_output=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    return parse_verbose_rows(result.stdout.decode("latin-1"))


# --- our side, rendered as the tool prints it -----------------------------------------------------

_INT_BITS = {T.TINY: 8, T.SHORT: 16, T.INT24: 24, T.LONG: 32, T.LONGLONG: 64}
_MYSQL_ESCAPES = {0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0C: "\\f", 0x0D: "\\r",
                  0x27: "\\'", 0x5C: "\\\\"}
_CP1252_BACK = {v: k for k, v in _CP1252_HIGH.items()}


def quoted(data: bytes, mysql: bool) -> str:
    """The tool's quoted form of a byte string, as latin-1 text."""
    out = []
    for b in data:
        if mysql and b in _MYSQL_ESCAPES:
            out.append(_MYSQL_ESCAPES[b])
        elif b < 0x20:
            out.append(f"\\x{b:02x}")
        else:
            out.append(chr(b))
    return "'" + "".join(out) + "'"


def stored_bytes(value: str | bytes, column: Column) -> bytes:
    """The bytes the row image held for a character/binary value we decoded."""
    if isinstance(value, bytes):
        return value
    codec = codec_for_collation(column.charset)
    assert codec is not None, (column, value)
    if codec == "mysql-latin1":
        return value.translate(_CP1252_BACK).encode("latin-1")
    return value.encode(codec)


def _frac(us: int, fsp: int) -> str:
    return f".{us:06d}"[: fsp + 1] if fsp else ""


def printed_form(value: Any, column: Column, mysql: bool) -> str:
    """Our decoded ``value`` of ``column`` in the text the flavor's tool prints (module doc)."""
    t = column.type_code
    if value is None:
        return "NULL"
    if t in _INT_BITS:
        bits = _INT_BITS[T(t)]
        signed = value - (1 << bits) if value >= 1 << (bits - 1) else value
        unsigned = value + (1 << bits) if value < 0 else value
        return f"{signed} ({unsigned})" if signed < 0 else str(signed)
    if t == T.YEAR:
        return str(value or 1900)
    if t == T.BIT:
        bits = (column.meta >> 8) * 8 + (column.meta & 0xFF)
        return f"b'{value:0{bits}b}'"
    if t == T.ENUM:
        assert column.enum_values is not None
        return str(column.enum_values.index(value) + 1 if value else 0)
    if t == T.SET:
        assert column.set_values is not None
        members = set(value.split(",")) if value else set()
        mask = sum(1 << k for k, label in enumerate(column.set_values) if label in members)
        return f"b'{mask:0{8 * (column.length or 1)}b}'"
    if t == T.NEWDECIMAL:
        assert isinstance(value, decimal.Decimal)
        return format(value, "f")
    if t == T.FLOAT:
        return f"{value:<20g}"
    if t == T.DOUBLE:
        return f"{value:.20g}"
    fsp = column.meta
    if t in (T.DATE, T.NEWDATE):
        text = value.text if isinstance(value, InvalidTemporal) else value.isoformat()
        return "'" + text.replace("-", ":") + "'"
    if t == T.DATETIME2:
        if isinstance(value, InvalidTemporal):
            return f"'{value.text}'"
        return (f"'{value.year:04d}-{value.month:02d}-{value.day:02d} {value.hour:02d}:"
                f"{value.minute:02d}:{value.second:02d}{_frac(value.microsecond, fsp)}'")
    if t == T.TIMESTAMP2:
        if isinstance(value, InvalidTemporal):
            return "0" + _frac(0, fsp)
        seconds = (value - _EPOCH) // datetime.timedelta(seconds=1)
        return f"{seconds}{_frac(value.microsecond, fsp)}"
    if t == T.TIME2:
        total = value // datetime.timedelta(microseconds=1)
        sign = "-" if total < 0 else ""
        seconds, us = divmod(abs(total), 1000000)
        minutes, second = divmod(seconds, 60)
        hours, minute = divmod(minutes, 60)
        return f"'{sign}{hours:02d}:{minute:02d}:{second:02d}{_frac(us, fsp)}'"
    if t in (T.VARCHAR, T.VAR_STRING, T.STRING, T.BLOB, T.TINY_BLOB, T.MEDIUM_BLOB,
             T.LONG_BLOB, T.GEOMETRY):
        data = stored_bytes(value, column)
        if t == T.STRING and column.charset == 63:
            data = data.rstrip(b"\x00")  # BINARY(n): the image holds it unpadded
        return quoted(data, mysql)
    if t == T.JSON:
        return quoted(value.encode("utf-8"), mysql)
    raise AssertionError(f"no printed-form rule for type {t} ({column})")


@dataclass
class OurRow:
    kind: RowsKind
    table: str
    before: dict[int, Any] | None
    after: dict[int, Any] | None


def our_rows(path: str, schema: str) -> list[tuple[OurRow, RowsEvent]]:
    stream = EventStream(file=Path(path).name)  # CRC32 verified
    out = []
    for _, raw in split_binlog(Path(path).read_bytes()):
        for event in stream.feed(raw):
            if not isinstance(event, RowsEvent) or event.table.schema != schema:
                continue
            name = f"`{event.table.schema}`.`{event.table.table}`"
            for r in range(event.row_count):
                before = ({c: event.before[k][r] for k, c in enumerate(event.before_columns)}
                          if event.before is not None else None)
                after = ({c: event.after[k][r] for k, c in enumerate(event.after_columns)}
                         if event.after is not None else None)
                out.append((OurRow(event.kind, name, before, after), event))
    return out


def compare(server: ServerHandle, schema: str) -> int:
    """Decode the newest closed binlog file both ways; assert every row agrees. Returns the
    number of values compared."""
    server.sql("FLUSH BINARY LOGS")
    path = server.binlog_files()[-2]  # closed: the last one is being written
    mysql = not server.is_mariadb
    theirs = [r for r in tool_rows(server, path) if r.table.startswith(f"`{schema}`.")]
    ours = our_rows(path, schema)
    assert len(ours) == len(theirs), (len(ours), len(theirs))
    compared = 0
    for n, ((mine, event), printed) in enumerate(zip(ours, theirs, strict=True)):
        assert (mine.kind, mine.table) == (printed.kind, printed.table), n
        for side in ("before", "after"):
            our_image, their_image = getattr(mine, side), getattr(printed, side)
            assert (our_image is None) == (their_image is None), (n, side)
            if our_image is None:
                continue
            assert sorted(our_image) == sorted(their_image), (n, side)
            for col, value in our_image.items():
                column = event.table.columns[col]
                assert printed_form(value, column, mysql) == their_image[col], (
                    f"{server.flavor} row {n} {side} {column.name} (type {column.type_code}): "
                    f"ours {value!r} -> {printed_form(value, column, mysql)!r}, "
                    f"tool {their_image[col]!r}")
                compared += 1
    return compared


@pytest.fixture(params=FLAVOR_FIXTURES)
def server(request: pytest.FixtureRequest) -> ServerHandle:
    handle: ServerHandle = request.getfixturevalue(request.param)
    return handle


def test_row_values_match_the_servers_binlog_tool(server: ServerHandle) -> None:
    schema = f"dd_{uuid.uuid4().hex[:10]}"
    workload = WORKLOAD + (WORKLOAD_MARIADB if server.is_mariadb else "")
    server.sql(f"CREATE DATABASE `{schema}`; USE `{schema}`;" + workload, client_args=UTF8)
    compared = compare(server, schema)
    # t: 3 inserts + 2 updates (two images) + 1 delete, 44 columns each;
    # x: 2 inserts + 1 update, 5 columns each
    assert compared == 8 * 44 + (4 * 5 if server.is_mariadb else 0), compared
    server.sql(f"DROP DATABASE `{schema}`")


def test_minimal_image_rows_match_the_servers_binlog_tool(server: ServerHandle) -> None:
    """MINIMAL images: the tool lists only the logged columns, and so do we."""
    schema = f"ddm_{uuid.uuid4().hex[:10]}"
    server.sql(
        f"CREATE DATABASE `{schema}`; USE `{schema}`; SET SESSION binlog_row_image='MINIMAL';"
        "CREATE TABLE m (id INT PRIMARY KEY, a INT UNSIGNED, b VARCHAR(10), c DATETIME(2));"
        "INSERT INTO m VALUES (1, 4294967295, 'x', '2024-02-29 01:02:03.45'), (2, NULL, 'y', NULL);"
        "UPDATE m SET b = NULL, c = '1999-12-31 23:59:59.99' WHERE id = 1;"
        "DELETE FROM m WHERE id = 2", client_args=UTF8)
    assert compare(server, schema) == 4 + 4 + 1 + 2 + 1
    server.sql(f"DROP DATABASE `{schema}`")
