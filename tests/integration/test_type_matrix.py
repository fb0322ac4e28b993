"""Type matrix on real servers: every column type family with edge values, written by INSERT,
UPDATE and DELETE, decoded from the server's own binlog files by binlake's TABLE_MAP/rows
decoders, and compared cell by cell with what ``SELECT`` returns.

The decoded events are replayed (keyed by the ``id`` primary key) into a table state; before
images must equal the replayed state, and the final state must equal the server's SELECT. Our
Python values are turned into the server's text form for the comparison (character data via
HEX(CONVERT(... USING utf8mb4)), binary via HEX, BIT via +0, TIMESTAMP in UTC).
"""

from __future__ import annotations

import datetime
import decimal
import math
import uuid
from pathlib import Path
from typing import Any

import pytest

from protocol.binlog.events import ChecksumAlg
from protocol.binlog.filereader import END_OF_FILE, BinlogFileReader
from protocol.binlog.model import RowsEvent, RowsKind, TableMapEvent
from protocol.binlog.stream import EventStream
from protocol.binlog.values import InvalidTemporal
from sinks.parquet.rows import PendingRows, TransactionTags, rows_batch
from sinks.parquet.schema import TableVersion, VersionOrigin
from sinks.parquet.types import new_counter
from tests.servers.handle import ServerHandle

pytestmark = pytest.mark.server

FLAVOR_FIXTURES = ["mariadb_10_11", "mariadb_11_8", "mysql_9_7"]
UTF8 = ["--default-character-set=utf8mb4"]


@pytest.fixture(params=FLAVOR_FIXTURES)
def server(request: pytest.FixtureRequest) -> ServerHandle:
    handle: ServerHandle = request.getfixturevalue(request.param)
    return handle


def _db(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def decoded_rows(server: ServerHandle, schema: str, arrow: bool = False) -> list[RowsEvent]:
    """Every rows event of ``schema`` in the server's binlog files, in order (``arrow``: decoded
    for the Parquet landing path, as the daemon does)."""
    server.sql("FLUSH BINARY LOGS")
    out: list[RowsEvent] = []
    for path in server.binlog_files():
        reader = BinlogFileReader()
        # CRC32 is verified on every event, the FDE included (its in-use flag cleared first).
        stream = EventStream(file=Path(path).name, arrow=arrow)
        reader.receive_data(Path(path).read_bytes())
        reader.receive_data(b"")
        while (raw := reader.next_event()) is not END_OF_FILE:
            assert isinstance(raw, bytes)
            for event in stream.feed(raw):
                if isinstance(event, RowsEvent) and event.table.schema == schema:
                    out.append(event)
        fde = stream.format_description
        assert fde is not None and fde.checksum_alg == ChecksumAlg.CRC32, path  # really checked
    return out


# --- our values in the server's text form ----------------------------------------------------


def _frac(us: int, fsp: int) -> str:
    return f".{us:06d}"[: fsp + 1] if fsp else ""


def as_text(value: Any, kind: str, fsp: int) -> str | None:
    if value is None:
        return None
    if isinstance(value, InvalidTemporal):
        return value.text
    if kind in ("text", "json_text"):
        assert isinstance(value, str), value
        return value.encode("utf-8").hex().upper()
    if kind == "bin":
        assert isinstance(value, bytes), value
        return value.hex().upper()
    if isinstance(value, datetime.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(datetime.UTC)
        return value.strftime("%Y-%m-%d %H:%M:%S") + _frac(value.microsecond, fsp)
    if isinstance(value, datetime.date):
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        total = value.days * 86400_000000 + value.seconds * 1000000 + value.microseconds
        sign = "-" if total < 0 else ""
        seconds, us = divmod(abs(total), 1000000)
        minutes, sec = divmod(seconds, 60)
        hours, minute = divmod(minutes, 60)
        return f"{sign}{hours:02d}:{minute:02d}:{sec:02d}{_frac(us, fsp)}"
    if isinstance(value, decimal.Decimal):
        return format(value, "f")
    if isinstance(value, float):
        return repr(value)
    return str(value)


def cells_equal(ours: str | None, theirs: str | None, kind: str) -> bool:
    if ours is None or theirs is None:
        return ours is theirs
    if kind in ("float", "double"):
        a, b = float(ours), float(theirs)
        return math.isclose(a, b, rel_tol=1e-6 if kind == "float" else 1e-15)
    if kind == "json":  # MySQL JSON: the server's canonical text
        return ours == theirs
    return ours == theirs


# --- the families ------------------------------------------------------------------------------
# (column name, SQL type, kind, fsp) — kind picks the SELECT expression and the comparison.

Col = tuple[str, str, str, int]


def _select_expr(col: Col) -> str:
    name, _, kind, _ = col
    if kind in ("text", "json_text"):
        return f"HEX(CONVERT(`{name}` USING utf8mb4))"
    if kind == "bin":
        return f"HEX(`{name}`)"
    if kind == "bit":
        return f"`{name}` + 0"
    if kind == "json":
        return f"CAST(`{name}` AS CHAR)"
    return f"`{name}`"


def families(mysql: bool) -> dict[str, tuple[list[Col], list[str]]]:
    json_type = "json" if mysql else "json_text"
    return {
        "ints": ([
            ("a", "TINYINT", "int", 0), ("b", "TINYINT UNSIGNED", "int", 0),
            ("c", "SMALLINT", "int", 0), ("d", "SMALLINT UNSIGNED", "int", 0),
            ("e", "MEDIUMINT", "int", 0), ("f", "MEDIUMINT UNSIGNED", "int", 0),
            ("g", "INT", "int", 0), ("h", "INT UNSIGNED", "int", 0),
            ("i", "BIGINT", "int", 0), ("j", "BIGINT UNSIGNED", "int", 0),
            ("y", "YEAR", "int", 0), ("b64", "BIT(64)", "bit", 0), ("b1", "BIT(1)", "bit", 0),
            ("b10", "BIT(10)", "bit", 0),
        ], [
            "INSERT INTO T VALUES (1,-128,255,-32768,65535,-8388608,16777215,-2147483648,"
            "4294967295,-9223372036854775808,18446744073709551615,2155,"
            "0xFFFFFFFFFFFFFFFF,1,b'1010101010')",
            "INSERT INTO T VALUES (2,127,0,32767,0,8388607,0,2147483647,0,9223372036854775807,0,"
            "1901,0,0,0)",
            "INSERT INTO T (id) VALUES (3)",
            "UPDATE T SET a=-1, j=18446744073709551614, y=2000 WHERE id=2",
            "UPDATE T SET a=5 WHERE id=3",
            "DELETE FROM T WHERE id=1",
            "INSERT INTO T VALUES (1,-128,255,-32768,65535,-8388608,16777215,-2147483648,"
            "4294967295,-9223372036854775808,18446744073709551615,2155,"
            "0xFFFFFFFFFFFFFFFF,1,b'1010101010')",
        ]),
        "nums": ([
            ("d1", "DECIMAL(65,30)", "dec", 0), ("d2", "DECIMAL(12,2)", "dec", 0),
            ("d3", "DECIMAL(10,0) UNSIGNED", "dec", 0), ("d4", "DECIMAL(5,5)", "dec", 0),
            ("d5", "DECIMAL(18,9)", "dec", 0), ("f", "FLOAT", "float", 0),
            ("dd", "DOUBLE", "double", 0),
        ], [
            "INSERT INTO T VALUES (1,"
            "'-12345678901234567890123456789012345.123456789012345678901234567890',"
            "'-1234567890.12',9999999999,-0.99999,'-123456789.123456789',3.14,"
            "-2.2250738585072014e-308)",
            "INSERT INTO T VALUES (2,"
            "'99999999999999999999999999999999999.999999999999999999999999999999','0.01',0,"
            "0.00001,'0.000000001',-1e30,1.7976931348623157e308)",
            "INSERT INTO T (id) VALUES (3)",
            "UPDATE T SET d1='-0.000000000000000000000000000001', dd=0.1 WHERE id=3",
        ]),
        "temporal": ([
            ("d", "DATE", "temporal", 0), ("dt", "DATETIME", "temporal", 0),
            ("dt3", "DATETIME(3)", "temporal", 3), ("dt6", "DATETIME(6)", "temporal", 6),
            ("ts", "TIMESTAMP NULL", "temporal", 0), ("ts6", "TIMESTAMP(6) NULL", "temporal", 6),
            ("t", "TIME", "temporal", 0), ("t1", "TIME(1)", "temporal", 1),
            ("t3", "TIME(3)", "temporal", 3), ("t6", "TIME(6)", "temporal", 6),
        ], [
            "INSERT INTO T VALUES (1,'2024-02-29','9999-12-31 23:59:59','2024-02-29 12:34:56.789',"
            "'1000-01-01 00:00:00.000001','2038-01-19 03:14:07','1970-01-01 00:00:01.000001',"
            "'-838:59:59','-00:00:00.1','-12:34:56.789','838:59:59.000000')",
            "INSERT INTO T VALUES (2,'0000-00-00','0000-00-00 00:00:00','2024-00-10 00:00:00',"
            "'2024-02-29 23:59:59.999999','0000-00-00 00:00:00','0000-00-00 00:00:00',"
            "'-00:00:01','-01:00:00.5','00:00:00.001','-838:59:59.000000')",
            "INSERT INTO T VALUES (3,'2024-00-10',NULL,NULL,NULL,NULL,NULL,'00:00:00',NULL,NULL,"
            "'-00:00:00.000001')",
            "UPDATE T SET t6='12:00:00.5', d='9999-12-31' WHERE id=3",
        ]),
        "strings": ([
            ("c", "CHAR(10) CHARACTER SET utf8mb4", "text", 0),
            ("c255", "CHAR(255) CHARACTER SET utf8mb4", "text", 0),
            ("v", "VARCHAR(300) CHARACTER SET utf8mb4", "text", 0),
            ("l", "VARCHAR(20) CHARACTER SET latin1", "text", 0),
            ("a", "VARCHAR(10) CHARACTER SET ascii", "text", 0),
            ("m3", "MEDIUMTEXT CHARACTER SET utf8mb3", "text", 0),
            ("tx", "TEXT CHARACTER SET utf8mb4", "text", 0),
            ("bn", "BINARY(4)", "bin", 0), ("vb", "VARBINARY(10)", "bin", 0),
            ("bl", "BLOB", "bin", 0), ("lb", "LONGBLOB", "bin", 0),
            ("tb", "TINYBLOB", "bin", 0),
            ("e", "ENUM('a','b','ç') CHARACTER SET latin1", "text", 0),
            ("s", "SET('x','y','z')", "text", 0),
            ("j", "JSON", json_type, 0),
            ("g", "GEOMETRY", "bin", 0),
        ], [
            "INSERT INTO T VALUES (1,'héllo',REPEAT('é',255),REPEAT('😀',300),'àéîõü€','plain',"
            "'mb3 é','text 😀',0x6162,0x00FF00,0x000102,REPEAT(0x00,5),0x00,'ç','',"
            "'{\"b\": [1, 2.5, null, true, false, \"s\"], \"a\": {\"x\": -1}, \"long key\": 1e100}',"
            "ST_GeomFromText('POINT(1 2)'))",
            "INSERT INTO T VALUES (2,'','','','','','','',0x00000000,'','','','','a','x,z','[]',"
            "NULL)",
            "INSERT INTO T (id) VALUES (3)",
            "UPDATE T SET v='upd', s='y,z', j='{\"k\": 18446744073709551615}' WHERE id=2",
            "DELETE FROM T WHERE id=3",
        ]),
    }


def run_family(server: ServerHandle, schema: str, name: str, cols: list[Col],
               statements: list[str]) -> None:
    ddl = ", ".join(f"`{c[0]}` {c[1]}" for c in cols)
    server.sql(f"CREATE TABLE `{schema}`.`{name}` (id INT PRIMARY KEY, {ddl})")
    script = ["SET SESSION sql_mode=''", "SET SESSION time_zone='+00:00'"]
    script += [s.replace("INSERT INTO T", f"INSERT INTO `{schema}`.`{name}`")
                .replace("UPDATE T", f"UPDATE `{schema}`.`{name}`")
                .replace("DELETE FROM T", f"DELETE FROM `{schema}`.`{name}`")
               for s in statements]
    server.sql(";\n".join(script), client_args=["--default-character-set=utf8mb4"])


def replay(events: list[RowsEvent], table: str) -> dict[int, dict[int, Any]]:
    state: dict[int, dict[int, Any]] = {}
    for ev in events:
        if ev.table.table != table:
            continue
        for r in range(ev.row_count):
            before = ({c: ev.before[k][r] for k, c in enumerate(ev.before_columns)}
                      if ev.before is not None else None)
            after = ({c: ev.after[k][r] for k, c in enumerate(ev.after_columns)}
                     if ev.after is not None else None)
            if ev.kind is RowsKind.INSERT:
                assert after is not None
                state[after[0]] = after
                continue
            assert before is not None
            current = state[before[0]]
            for c, v in before.items():
                assert current.get(c) == v, (table, c, current.get(c), v)
            if ev.kind is RowsKind.DELETE:
                del state[before[0]]
            else:
                assert after is not None
                del state[before[0]]
                current.update(after)
                state[current[0]] = current
    return state


def test_type_matrix(server: ServerHandle) -> None:
    schema = _db("tm")
    mysql = not server.is_mariadb
    server.sql(f"CREATE DATABASE `{schema}`")
    fams = families(mysql)
    for name, (cols, statements) in fams.items():
        run_family(server, schema, name, cols, statements)
    events = decoded_rows(server, schema)
    assert events, "no rows events decoded"
    for name, (cols, _) in fams.items():
        state = replay(events, name)
        select = ", ".join(["id", *(_select_expr(c) for c in cols)])
        rows = server.sql(f"SET SESSION time_zone='+00:00'; SELECT {select} FROM "
                          f"`{schema}`.`{name}` ORDER BY id")
        assert sorted(state) == [int(r[0]) for r in rows if r[0] is not None], name
        for row in rows:
            ours = state[int(row[0] or 0)]
            for k, col in enumerate(cols, start=1):
                mine = as_text(ours[k], col[2], col[3])
                assert cells_equal(mine, row[k], col[2]), (
                    f"{server.flavor} {name}.{col[0]} id={row[0]}: ours {ours[k]!r} -> {mine!r}, "
                    f"server {row[k]!r}")
    assert_arrow_landing_matches(server, schema, events, fams)
    server.sql(f"DROP DATABASE `{schema}`")


def assert_arrow_landing_matches(server: ServerHandle, schema: str, events: list[RowsEvent],
                                 fams: dict[str, tuple[list[Col], list[str]]]) -> None:
    """The same binlog decoded for Arrow (the native decoder's chunks, as the daemon lands
    them) lands the same record batches as the Python values, family by family; every family
    really took the native path."""
    arrow_events = decoded_rows(server, schema, arrow=True)
    assert [e.row_count for e in arrow_events] == [e.row_count for e in events]
    tags = TransactionTags(1, None, None, None, None, None, None, "f", 4)
    with_chunks: dict[str, bool] = {}
    for name in fams:
        mine = [e for e in events if e.table.table == name]
        theirs = [e for e in arrow_events if e.table.table == name]
        with_chunks[name] = all(e.arrow is not None for e in theirs)
        assert replay(theirs, name) == replay(mine, name)
        batches = []
        for group in (mine, theirs):
            counter = new_counter()
            version = TableVersion.from_table_map(group[0].table, 1, VersionOrigin(1), counter)
            batches.append((rows_batch(version, [PendingRows(e, tags, 0, (), 1) for e in group
                                                 if e.row_count], with_commit_time=True),
                            counter.invalid_temporal))
        (expected, expected_zero), (got, got_zero) = batches
        assert got.schema == expected.schema, name
        for column in expected.schema.names:
            assert got.column(column).to_pylist() == expected.column(column).to_pylist(), (
                f"{server.flavor} {name}.{column}")
        assert got_zero == expected_zero, name
    assert with_chunks == {"ints": True, "nums": True, "temporal": True, "strings": True}


def test_minimal_and_noblob_images(server: ServerHandle) -> None:
    schema = _db("img")
    server.sql(f"CREATE DATABASE `{schema}`; CREATE TABLE `{schema}`.t (id INT PRIMARY KEY, "
               "a INT, b VARCHAR(10), blb BLOB, n INT NULL)")
    for image in ("MINIMAL", "NOBLOB"):
        base = 10 if image == "MINIMAL" else 20
        server.sql(
            f"SET SESSION binlog_row_image='{image}';"
            f"INSERT INTO `{schema}`.t VALUES ({base},1,'x',0x01,NULL);"
            f"UPDATE `{schema}`.t SET a=2 WHERE id={base};"
            f"UPDATE `{schema}`.t SET n=NULL, b='y' WHERE id={base};"
            f"DELETE FROM `{schema}`.t WHERE id={base}")
    events = decoded_rows(server, schema)
    minimal = [e for e in events if e.rows_after() and e.rows_after()[0].get("id") == 10
               or e.rows_before() and e.rows_before()[0].get("id") == 10]
    noblob = [e for e in events if e not in minimal]
    kinds = [e.kind for e in minimal]
    assert kinds == [RowsKind.INSERT, RowsKind.UPDATE, RowsKind.UPDATE, RowsKind.DELETE]
    # MINIMAL: the before image is the PK only, the after image the changed columns only.
    upd = minimal[1]
    assert upd.before_columns == (0,)
    assert upd.after_columns == (1,) and upd.after == ([2],)
    upd2 = minimal[2]
    assert set(upd2.after_columns) == {2, 4}
    assert upd2.rows_after() == [{"b": "y", "n": None}]  # n present and NULL, not absent
    assert minimal[3].before_columns == (0,)
    # NOBLOB: every column but the unchanged BLOB.
    assert [e.kind for e in noblob] == kinds
    assert 3 not in noblob[1].before_columns and 3 not in noblob[1].after_columns
    assert noblob[0].after_columns == (0, 1, 2, 3, 4)  # INSERT carries the BLOB
    server.sql(f"DROP DATABASE `{schema}`")


def test_alter_mid_stream(server: ServerHandle) -> None:
    schema = _db("alt")
    t = f"`{schema}`.t"
    server.sql(
        f"CREATE DATABASE `{schema}`; CREATE TABLE {t} (id INT PRIMARY KEY, a INT, b VARCHAR(5));"
        f"INSERT INTO {t} VALUES (1, 10, 'one');"
        f"ALTER TABLE {t} ADD COLUMN c DECIMAL(5,2) AFTER id;"
        f"INSERT INTO {t} VALUES (2, 1.5, 20, 'two');"
        f"ALTER TABLE {t} DROP COLUMN a;"
        f"INSERT INTO {t} VALUES (3, 2.25, 'three');"
        f"ALTER TABLE {t} MODIFY b VARCHAR(5) AFTER id;"
        f"INSERT INTO {t} VALUES (4, 'four', 3.75);"
        f"UPDATE {t} SET c = 9.99 WHERE id = 1")
    events = decoded_rows(server, schema)
    got = [(e.kind, e.rows_before(), e.rows_after()) for e in events]
    d = decimal.Decimal
    assert got == [
        (RowsKind.INSERT, [], [{"id": 1, "a": 10, "b": "one"}]),
        (RowsKind.INSERT, [], [{"id": 2, "c": d("1.50"), "a": 20, "b": "two"}]),
        (RowsKind.INSERT, [], [{"id": 3, "c": d("2.25"), "b": "three"}]),
        (RowsKind.INSERT, [], [{"id": 4, "b": "four", "c": d("3.75")}]),
        (RowsKind.UPDATE, [{"id": 1, "b": "one", "c": None}],
         [{"id": 1, "b": "one", "c": d("9.99")}]),
    ]
    server.sql(f"DROP DATABASE `{schema}`")


def test_table_map_metadata(server: ServerHandle) -> None:
    schema = _db("meta")
    server.sql(f"CREATE DATABASE `{schema}`; CREATE TABLE `{schema}`.t (id INT UNSIGNED NOT NULL,"
               " k VARCHAR(4) CHARACTER SET latin1, e ENUM('p','q'), PRIMARY KEY (id, k));"
               f"INSERT INTO `{schema}`.t VALUES (1, 'k', 'q')")
    events = decoded_rows(server, schema)
    table: TableMapEvent = events[0].table
    assert table.has_full_metadata
    assert [c.name for c in table.columns] == ["id", "k", "e"]
    assert table.primary_key == (0, 1)
    assert table.columns[0].unsigned and not table.columns[0].nullable
    assert table.columns[1].charset in (5, 8, 15, 31, 47, 48, 49, 94)
    assert table.columns[2].enum_values == ("p", "q")
    assert events[0].rows_after() == [{"id": 1, "k": "k", "e": "q"}]
    server.sql(f"DROP DATABASE `{schema}`")


def test_mysql_json_opaque_values_and_partial_updates(mysql_9_7: ServerHandle) -> None:
    """MySQL binary JSON with opaque values, and PARTIAL_UPDATE_ROWS: with a FULL before image
    the diff is applied (after value = the JSON SELECT returns); with MINIMAL it is surfaced."""
    from protocol.binlog.values import JsonDiff

    server = mysql_9_7
    schema = _db("pj")
    t = f"`{schema}`.t"
    server.sql(
        f"CREATE DATABASE `{schema}`; CREATE TABLE {t} (id INT PRIMARY KEY, j JSON, k JSON);"
        f"INSERT INTO {t} VALUES (1, JSON_OBJECT('dt', CAST('2024-02-29 10:11:12.5' AS DATETIME(6)),"
        " 'd', CAST('2024-02-29' AS DATE), 't', CAST('-01:02:03' AS TIME), "
        " 'dec', CAST(1.50 AS DECIMAL(5,2)), 'dbl', 0.1e0, 'big', 18446744073709551615, "
        " 'neg', -5, 'nested', JSON_ARRAY(1, JSON_OBJECT('x', NULL), 'é\"\\n')), '[1, 2, 3]');"
        "SET SESSION binlog_row_value_options='PARTIAL_JSON';"
        f"UPDATE {t} SET j = JSON_SET(j, '$.neg', 7, '$.added', 'v'), "
        "k = JSON_REMOVE(k, '$[0]') WHERE id = 1;"
        f"UPDATE {t} SET j = JSON_REPLACE(j, '$.nested[0]', 'one') WHERE id = 1;"
        "SET SESSION binlog_row_image='MINIMAL';"
        f"UPDATE {t} SET k = JSON_SET(k, '$[0]', 42) WHERE id = 1", client_args=UTF8)
    events = decoded_rows(server, schema)
    final = server.sql(f"SELECT CAST(j AS CHAR), CAST(k AS CHAR) FROM {t} WHERE id = 1",
                       client_args=UTF8)[0]
    first = events[0].rows_after()[0]
    assert first["k"] == "[1, 2, 3]"
    updates = events[1:]
    assert [e.kind for e in updates] == [RowsKind.UPDATE] * 3
    assert [e.header.type_code for e in updates] == [39, 39, 39]  # PARTIAL_UPDATE_ROWS
    # the FULL-image partial updates: the after value is the whole new document
    assert updates[1].rows_after()[0]["j"] == final[0]
    assert updates[0].rows_after()[0]["k"] == "[2, 3]"
    # MINIMAL: the before image lacks k; a diff would be surfaced as a JsonDiff
    last = updates[2].rows_after()[0]["k"]
    if isinstance(last, JsonDiff):
        assert last.ops == ((0, "$[0]", "42"),)
    else:  # MySQL 9.7 logs the full value here (seen): nothing to surface
        assert last == final[1]
    server.sql(f"DROP DATABASE `{schema}`")


def test_mysql_vector(mysql_9_7: ServerHandle) -> None:
    """MySQL 9 VECTOR: decoded as the stored bytes (little-endian float32s); the TABLE_MAP's
    VECTOR_DIMENSIONALITY lands in ``Column.precision``."""
    server = mysql_9_7
    schema = _db("vec")
    t = f"`{schema}`.t"
    server.sql(f"CREATE DATABASE `{schema}`; CREATE TABLE {t} (id INT PRIMARY KEY, v VECTOR(3));"
               f"INSERT INTO {t} VALUES (1, STRING_TO_VECTOR('[1.5, -2, 3.25]'))")
    events = decoded_rows(server, schema)
    hex_value = server.sql(f"SELECT HEX(v) FROM {t}")[0][0]
    (value,) = events[0].after[1]
    assert isinstance(value, bytes) and value.hex().upper() == hex_value
    import struct
    assert struct.unpack("<3f", value) == (1.5, -2.0, 3.25)
    column = events[0].table.columns[1]
    assert column.type_code == 242 and column.precision == 3, column
    server.sql(f"DROP DATABASE `{schema}`")
