"""Same values either way: a table's existing rows read by a snapshot land with
exactly the Arrow types and values the same rows get when they arrive through the binlog.

Per server: every family of the type matrix (``test_type_matrix.families``: integers, BIT,
DECIMAL(65,30), FLOAT/DOUBLE, zero and invalid dates, TIME with fractions, TIMESTAMP, charsets,
CHAR(255) utf8mb4, BINARY, BLOBs, ENUM/SET, JSON, GEOMETRY, NULLs) plus a family of what the
matrix leaves out (spatial subtypes, MariaDB's UUID/INET4/INET6, MySQL's VECTOR, utf16/ucs2/
cp1251, sjis, the server's default collation, padded CHAR/BINARY, FLOAT(M,D)/DOUBLE(M,D), -0e0) gets
two identical tables. ``<family>_before`` is filled first and read like a snapshot does —
``describe_table`` + ``SELECT select_list`` (after ``SESSION_SETUP``), kept unparsed and made Arrow chunks by
``decode_kept`` (the engine's path with the native extension) — and landed as R rows through
``ParquetSink.land_chunk``; the same rows parsed and converted by the reference
(``decode_rows``) land in a lake of their own, which must be equal, row for row; ``<family>_twin`` is filled afterwards with the same statements and landed by
the daemon from the binlog. Then, cell for cell: the two lakes' Arrow schemas are equal, their
current states are equal, and both equal ``SELECT`` (test_type_matrix's text comparison); the
TABLE_MAP ``describe_table`` gives for the twin has the signature of the schema version the
daemon created from the real TABLE_MAP.

Besides the three servers with ``binlog_row_metadata=FULL``, the servers of
``test_schema_source_servers`` (NO_LOG, MINIMAL; shared by name) prove the same where the
daemon completes its TABLE_MAPs from information_schema.
"""

from __future__ import annotations

import json
import math
import os
import struct
import uuid
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import trio

from protocol.binlog.model import BinlogPosition, EventHeader, RowsEvent, RowsKind
from protocol.results import is_binary_column
from protocol.snapshot import SESSION_SETUP, SnapshotTable
from replica.core.connection import Connection, ConnectOptions
from replica.core.snapshot_describe import describe_table
from sinks.chunks import SnapshotChunk
from sinks.contract import SnapshotProgress
from sinks.parquet.schema import TableVersion, signature
from sinks.parquet.types import new_counter
from sinks.parquet.writer import ParquetSink
from tests.servers.handle import ServerHandle

from .daemon_process import binlog_end, catch_up, catch_up_config
from .test_schema_source_servers import SERVERS as METADATA_SERVERS
from .test_type_matrix import Col, as_text, cells_equal, families
from .workload import read_lake

pytestmark = pytest.mark.server

UTF8 = ["--default-character-set=utf8mb4"]
FULL = {"10.11": "mariadb_10_11", "11.8": "mariadb_11_8", "9.7": "mysql_9_7"}
PARTIAL = {"10.11-minimal", "10.11-no-log", "11.8-no-log", "9.7-minimal-compressed"}


@pytest.fixture(params=[*FULL, *sorted(PARTIAL)])
def server(request: pytest.FixtureRequest, server_factory: Any) -> ServerHandle:
    if request.param in FULL:
        handle: ServerHandle = request.getfixturevalue(FULL[request.param])
        return handle
    flavor, metadata, extra = METADATA_SERVERS[request.param]
    handle = server_factory.start(flavor, extra_args=[f"--binlog-row-metadata={metadata}",
                                                      *extra],
                                  name=f"row-metadata-{request.param}")
    return handle


def extras(mysql: bool) -> tuple[list[Col], list[str]]:
    """The types the matrix leaves out, as a family."""
    cols: list[Col] = [
        ("pt", "POINT", "bin", 0), ("pg", "POLYGON", "bin", 0),
        ("u16", "VARCHAR(10) CHARACTER SET utf16", "text", 0),
        ("ucs", "CHAR(5) CHARACTER SET ucs2", "text", 0),
        ("cyr", "VARCHAR(10) CHARACTER SET cp1251", "text", 0),
        ("sj", "VARCHAR(10) CHARACTER SET sjis", "text", 0),  # a server-derived table
        ("dflt", "VARCHAR(10)", "text", 0),  # the server's default collation (UCA-14 on 11.8)
        ("pad", "CHAR(5) CHARACTER SET latin1", "text", 0), ("bz", "BINARY(5)", "bin", 0),
        ("fmd", "FLOAT(7,3)", "float", 0), ("dmd", "DOUBLE(10,2)", "double", 0),
        ("fz", "FLOAT", "float", 0), ("bo", "BOOL", "int", 0),
        ("e300", "ENUM(" + ",".join(f"'v{i}'" for i in range(300)) + ")", "text", 0),
        ("s64", "SET(" + ",".join(f"'m{i}'" for i in range(64)) + ")", "text", 0),
    ]
    row1 = ("ST_GeomFromText('POINT(1.5 -2)'), ST_GeomFromText('POLYGON((0 0,1 0,1 1,0 0))'),"
            "'ü😀', 'äb', 'Жж', 'x\\\\yｱ', 'dé', 'a  ', 0x6100, 1234.5678, 12345678.915, -0e0, 1, 'v299',"
            "'m0,m63'")
    row2 = "NULL, NULL, '', '', '', '', '', '', 0x00, -0.001, -0.01, 3.4e38, 0, 'v0', ''"
    if mysql:
        cols += [("v", "VECTOR(2)", "bin", 0), ("gc", "GEOMETRYCOLLECTION", "bin", 0)]
        row1 += (", STRING_TO_VECTOR('[1.5, -2]'), "
                 "ST_GeomFromText('GEOMETRYCOLLECTION(POINT(1 1),LINESTRING(0 0,1 1))')")
        row2 += ", NULL, NULL"
    else:
        cols += [("u", "UUID", "bin", 0), ("i4", "INET4", "bin", 0), ("i6", "INET6", "bin", 0)]
        row1 += ", '123e4567-e89b-12d3-a456-426614174000', '10.0.0.1', '::ffff:10.0.0.1'"
        row2 += ", '00000000-0000-0000-0000-000000000000', '0.0.0.0', '::'"
    return cols, [f"INSERT INTO T VALUES (1, {row1})", f"INSERT INTO T VALUES (2, {row2})",
                  "INSERT INTO T (id) VALUES (3)"]


def _fill(server: ServerHandle, db: str, table: str, cols: list[Col],
          statements: list[str], create: bool = True) -> None:
    script = ["SET SESSION sql_mode=''", "SET SESSION time_zone='+00:00'"]
    if create:
        ddl = ", ".join(f"`{c[0]}` {c[1]}" for c in cols)
        script.append(f"CREATE TABLE `{db}`.`{table}` (id INT PRIMARY KEY, {ddl})")
    script += [s.replace("INSERT INTO T", f"INSERT INTO `{db}`.`{table}`")
                .replace("UPDATE T", f"UPDATE `{db}`.`{table}`")
                .replace("DELETE FROM T", f"DELETE FROM `{db}`.`{table}`")
               for s in statements]
    server.sql(";\n".join(script), client_args=UTF8)


async def _snapshot(server: ServerHandle, db: str, tables: list[str]
                    ) -> dict[str, SnapshotTable]:
    """Each table described and read as the snapshot engine does, as the replication user."""
    user = server.users["repl"]
    options = ConnectOptions(unix_socket=server.socket, user=user.name, password=user.password)
    out: dict[str, SnapshotTable] = {}
    async with await Connection.open(options) as conn:
        for table in tables:
            out[table] = await describe_table(conn, db, table)
    return out


async def _read(server: ServerHandle, snap: SnapshotTable) -> tuple[Any, Any, Any]:
    """The reference's columns, and the engine's (kept rows: its image and Arrow chunks; the
    reference's again without the native extension)."""
    user = server.users["repl"]
    options = ConnectOptions(unix_socket=server.socket, user=user.name, password=user.password)
    sql = f"SELECT {snap.select_list} FROM `{snap.database}`.`{snap.name}` ORDER BY id"
    async with await Connection.open(options) as conn:
        for statement in SESSION_SETUP:
            await conn.execute(statement)
        reference = snap.decode_rows(await conn.query(sql))
        if not snap.reads_kept:
            return reference, reference, None
        await conn.send_query(sql)
        result = await conn.read_columns(keep=True)
    assert result.kept is not None and result.kept_rows == len(reference[0])
    image, chunks = snap.decode_kept(result.kept, result.kept_rows,
                                     tuple(map(is_binary_column, result.columns)))
    return reference, image, chunks


def _land(lake: Path, snaps: list[tuple[SnapshotTable, Any, Any]]) -> None:
    """Snapshot rows landed as the snapshot engine lands a chunk: a READ rows event through
    ``ParquetSink.land_chunk`` (``_op`` = R)."""
    sink = ParquetSink(os.fspath(lake))
    sink.open()
    position = BinlogPosition("binlog.000001", 4)
    for snap, columns, chunks in snaps:
        event = RowsEvent(
            header=EventHeader(timestamp=0, type_code=0, server_id=0, event_size=0, log_pos=0,
                               flags=0),
            kind=RowsKind.READ, table=snap.table_map, flags=0, row_count=len(columns[0]),
            before_columns=(), after_columns=tuple(range(len(columns))), before=None,
            after=columns, arrow=None if chunks is None else (None, chunks))
        sink.land_chunk(SnapshotChunk(SnapshotProgress(), position, 1_767_225_600_000_000, event))
    sink.flush()
    sink.close()


def _state(lake: Path, db: str, table: str) -> dict[int, dict[str, Any]]:
    """A table's current state in the lake: the last image per id, deletes applied."""
    state: dict[int, dict[str, Any]] = {}
    for row in read_lake(lake, db).rows[table]:
        if row["_op"] == "D":
            del state[row["id"]]
        else:
            state[row["id"]] = {k: v for k, v in row.items()
                                if not k.startswith("_") and k not in ("schema_version",
                                                                       "commit_date")}
    return state


def _data_schema(lake: Path, db: str, table: str) -> list[tuple[str, str, dict[bytes, bytes]]]:
    (path,) = sorted((lake / db / table).rglob("*.parquet"))
    schema = pq.read_schema(path)
    return [(f.name, str(f.type), dict(f.metadata or {})) for f in schema
            if not f.name.startswith("_")]


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return struct.pack("<d", a) == struct.pack("<d", b) or (math.isnan(a) and math.isnan(b))
    return bool(type(a) is type(b) and a == b)


def _select_expr(col: Col) -> str:
    name, _, kind, _ = col
    if kind in ("text", "json_text"):
        return f"HEX(CONVERT(`{name}` USING utf8mb4))"
    if kind == "bin":
        return f"HEX(`{name}`)"
    if kind in ("float", "double"):
        return f"CAST(`{name}` AS DOUBLE)"
    if kind == "json":
        return f"CAST(`{name}` AS CHAR)"
    if kind in ("int", "bit"):
        return f"`{name}` + 0"
    return f"`{name}`"


def _invalid_temporal(text: str | None) -> bool:
    """A DATE/DATETIME/TIMESTAMP text Python cannot hold (zero or invalid): the lake has NULL."""
    import datetime

    if text is None or not text[:4].isdigit() or text[4:5] != "-":
        return False
    try:
        datetime.date.fromisoformat(text[:10])
    except ValueError:
        return True
    return False


def _lake_text(value: Any, col: Col) -> str | None:
    """A lake cell in test_type_matrix's text form (TIMESTAMPs and TIMEs land as numbers)."""
    import datetime

    if value is not None and col[1].startswith("TIME") and isinstance(value, int):
        value = datetime.timedelta(microseconds=value)
    if col[2] == "bit" and isinstance(value, int) and value < 0:
        value += 1 << 64
    return as_text(value, col[2], col[3])


def test_snapshot_rows_land_like_binlog_rows(server: ServerHandle, tmp_path: Path) -> None:
    mysql = not server.is_mariadb
    db = f"snapvals_{uuid.uuid4().hex[:10]}"
    server.sql(f"CREATE DATABASE `{db}`")
    fams = dict(families(mysql))
    fams["extras"] = extras(mysql)
    for name, (cols, statements) in fams.items():
        _fill(server, db, f"{name}_before", cols, statements)
    for name, (cols, _) in fams.items():  # the twins exist before the binlog stretch starts
        _fill(server, db, f"{name}_twin", cols, [])
    start = binlog_end(server)
    snaps = trio.run(_snapshot, server, db, [f"{n}_before" for n in fams])
    read = {name: trio.run(_read, server, snap) for name, snap in snaps.items()}
    for name, (cols, statements) in fams.items():  # the same rows, now through the binlog
        _fill(server, db, f"{name}_twin", cols, statements, create=False)

    snap_lake, binlog_lake = tmp_path / "snapshot", tmp_path / "binlog"
    _land(snap_lake, [(snaps[t], read[t][1], read[t][2]) for t in snaps])
    reference_lake = tmp_path / "reference"
    _land(reference_lake, [(snaps[t], read[t][0], None) for t in snaps])
    straight, reference = read_lake(snap_lake, db).rows, read_lake(reference_lake, db).rows
    for table in snaps:  # the engine's Arrow chunks land what the reference lands
        assert straight[table] == reference[table], table
        assert _data_schema(snap_lake, db, table) == _data_schema(reference_lake, db, table)
    trio.run(catch_up, catch_up_config(server, binlog_lake, start, include=(db,)))
    twins = trio.run(_snapshot, server, db, [f"{n}_twin" for n in fams])

    for name, (cols, _) in fams.items():
        before, twin = f"{name}_before", f"{name}_twin"
        # one schema: the daemon's version of the twin (from its real TABLE_MAP) is the
        # snapshot's, and the snapshot of the twin has the same signature
        (doc,) = [json.loads(p.read_text()) for p in (binlog_lake / db / twin / "_schema")
                  .glob("v*.json")]
        version = TableVersion.from_json(doc, new_counter())
        for snap in (twins[twin], snaps[before]):
            assert signature(snap.table_map)[:2] == version.signature[:2], (server.flavor, name)
            for ours_col, theirs_col in zip(signature(snap.table_map)[2], version.signature[2],
                                            strict=True):
                assert ours_col == theirs_col, (server.flavor, name)
        assert _data_schema(snap_lake, db, before) == _data_schema(binlog_lake, db, twin), name
        # the same cells
        assert {r["_op"] for r in read_lake(snap_lake, db).rows[before]} == {"R"}, name
        ours, theirs = _state(snap_lake, db, before), _state(binlog_lake, db, twin)
        assert sorted(ours) == sorted(theirs), name
        for key in theirs:
            for column, value in theirs[key].items():
                assert _same(ours[key][column], value), (
                    f"{server.flavor} {name}.{column} id={key}: snapshot "
                    f"{ours[key][column]!r}, binlog {value!r}")
        # and both are what SELECT says
        select = ", ".join(["id", *(_select_expr(c) for c in cols)])
        for table, state in ((before, ours), (twin, theirs)):
            rows = server.sql(f"SET SESSION time_zone='+00:00'; SELECT {select} FROM "
                              f"`{db}`.`{table}` ORDER BY id", client_args=UTF8)
            assert sorted(state) == [int(r[0] or 0) for r in rows], (table, rows)
            for row in rows:
                cells = state[int(row[0] or 0)]
                for k, col in enumerate(cols, start=1):
                    mine = _lake_text(cells[col[0]], col)
                    if mine is None and _invalid_temporal(row[k]):
                        continue  # zero dates land as NULL (see docs/lake-format.md)
                    assert cells_equal(mine, row[k], col[2]), (
                        f"{server.flavor} {table}.{col[0]} id={row[0]}: lake "
                        f"{cells[col[0]]!r} -> {mine!r}, server {row[k]!r}")
    server.sql(f"DROP DATABASE `{db}`")
