"""Tables of one shape share what their shape alone decides, and nothing that names them.

Real schemas repeat a few table definitions over thousands of tables (a table per tenant, per
month...). The TABLE_MAP cache parses a definition once and hands every table of it the same
columns tuple; the row decoders, schema signatures and the sink's resolved Arrow schemas are
shared by that tuple (a new table's set-up would otherwise be most of the cost of landing over
thousands of tables). These tests prove each cache is keyed by everything that makes a table and a
version different: names, charsets, flags, flavour, an ALTER mid-stream, a restart.
"""

from __future__ import annotations

import dataclasses
import json
import os
import struct
from typing import Any

import pyarrow.parquet as pq
import pytest

from protocol.binlog.coltypes import FieldType as T
from protocol.binlog.model import RowsEvent, RowsKind, TableMapEvent
from protocol.binlog.rows import DecoderCache, decode_rows_event
from protocol.binlog.stream import EventStream
from protocol.binlog.tablemap import TableMapCache, decode_table_map
from protocol.errors import EventDecodeError, RowDecodeError
from sinks.errors import UnsupportedValue
from sinks.parquet import ParquetSink
from sinks.parquet.testing import StreamBuilder
from tests.unit.rowbuild import Col, header, i32, image, rows_body, table_map_body

COLS = [Col(T.LONG, name="id", nullable=False), Col(T.VARCHAR, b"\x40\x00", name="v",
                                                      charset=45)]


def body(table: str, cols: list[Col] = COLS, *, schema: str = "shop",
         table_id: int = 42) -> bytes:
    numeric = [i for i, c in enumerate(cols) if c.type_code in (T.LONG, T.LONGLONG)]
    character = [i for i, c in enumerate(cols) if c.type_code == T.VARCHAR]
    return table_map_body(cols, table_id=table_id, schema=schema, table=table,
                          numeric=numeric, character=character, pk=(0,))


def decode(maps: TableMapCache, data: bytes, *, mariadb: bool = False) -> TableMapEvent:
    return maps.decode(header(19, 100), memoryview(data), 8, mariadb=mariadb)


# --- the TABLE_MAP cache ---------------------------------------------------------------------


def test_tables_of_one_definition_share_columns_and_keep_their_own_names() -> None:
    maps = TableMapCache()
    a = decode(maps, body("t_a", table_id=1))
    b = decode(maps, body("t_b", table_id=2))
    other_db = decode(maps, body("t_a", schema="crm", table_id=3))
    assert (a.schema, a.table, a.table_id) == ("shop", "t_a", 1)
    assert (b.schema, b.table, b.table_id) == ("shop", "t_b", 2)
    assert (other_db.schema, other_db.table, other_db.table_id) == ("crm", "t_a", 3)
    assert b.columns is a.columns and other_db.columns is a.columns
    assert b.primary_key == (0,) and b.has_full_metadata is True
    # exactly what the uncached decoder makes of each body
    for event, data in ((a, body("t_a", table_id=1)), (b, body("t_b", table_id=2))):
        assert event == decode_table_map(header(19, 100), data, 8)


@pytest.mark.parametrize("differs", ["name", "charset", "nullable", "unsigned", "type", "meta"])
def test_a_definition_differing_in_one_detail_is_parsed_for_itself(differs: str) -> None:
    changed = [dataclasses.replace(COLS[0]), dataclasses.replace(COLS[1])]
    if differs == "name":
        changed[1].name = "w"
    elif differs == "charset":
        changed[1].charset = 63
    elif differs == "nullable":
        changed[1].nullable = False
    elif differs == "unsigned":
        changed[0].unsigned = True
    elif differs == "type":
        changed[0] = Col(T.LONGLONG, name="id", nullable=False)
    else:
        changed[1].meta = b"\x80\x00"  # VARCHAR(128)
    maps = TableMapCache()
    a = decode(maps, body("t_a"))
    b = decode(maps, body("t_b", changed))
    assert b.columns is not a.columns and b.columns != a.columns
    assert b == decode_table_map(header(19, 100), body("t_b", changed), 8)
    assert a == decode_table_map(header(19, 100), body("t_a"), 8)
    # and the first shape is still its own after the second
    assert decode(maps, body("t_c")).columns is a.columns


def test_the_flavour_is_part_of_the_definition() -> None:
    # MariaDB counts a GEOMETRY column among the character columns of the charset TLV, MySQL
    # does not: the same bytes make different columns.
    cols = [Col(T.GEOMETRY, b"\x04", name="g"), Col(T.VARCHAR, b"\x40\x00", name="v")]
    data = table_map_body(cols, table="geo", character=[1])  # one collation: 63
    maps = TableMapCache()
    mysql = decode(maps, data)
    mariadb = decode(maps, data, mariadb=True)
    assert mysql == decode_table_map(header(19, 100), data, 8, mariadb=False)
    assert mariadb == decode_table_map(header(19, 100), data, 8, mariadb=True)
    assert mysql.columns is not mariadb.columns
    assert (mysql.columns[1].charset, mariadb.columns[1].charset) == (63, None)


def test_a_malformed_definition_fails_every_time_and_is_never_cached() -> None:
    maps = TableMapCache()
    good = decode(maps, body("t_a"))
    truncated = body("t_b")[:-1]  # the last TLV (the primary key) ends early
    for _ in range(2):
        with pytest.raises(EventDecodeError):
            decode(maps, truncated)
    assert decode(maps, body("t_c")).columns is good.columns


# --- the row decoders --------------------------------------------------------------------------


def _event(type_code: int, data: bytes, log_pos: int) -> bytes:
    size = 19 + len(data)
    return struct.pack("<IBIIIH", 0, type_code, 1, size, log_pos, 0) + data


def test_each_table_of_a_shape_gets_its_own_decoder_and_values() -> None:
    stream = EventStream(checksum=False)
    seen: list[tuple[str, list[Any]]] = []
    for n, (table, table_id) in enumerate((("t_a", 1), ("t_b", 2), ("t_a", 1), ("t_b", 2))):
        stream.feed(_event(19, body(table, table_id=table_id), 1000 + n))
        rows = rows_body(2, [image([i32(table_id * 10 + n), b"\x02hi"])], table_id=table_id)
        (event,) = stream.feed(_event(23, rows, 2000 + n))
        assert isinstance(event, RowsEvent)
        seen.append((event.table.table, [column[0] for column in event.after or ()]))
    assert seen == [("t_a", [10, "hi"]), ("t_b", [21, "hi"]), ("t_a", [12, "hi"]),
                    ("t_b", [23, "hi"])]


def test_a_decoding_error_names_the_table_it_came_from() -> None:
    maps, decoders = TableMapCache(), DecoderCache()
    a = decode(maps, body("t_a", table_id=1))
    b = decode(maps, body("t_b", table_id=2))
    assert decoders.decoder_for(a) is not decoders.decoder_for(b)
    assert decoders.decoder_for(b).table.table == "t_b"
    bad = rows_body(2, [image([i32(1), b"\x09hi"])], table_id=2)  # length past the end
    with pytest.raises(RowDecodeError, match="t_b") as caught:
        decode_rows_event(header(23), memoryview(bad), 8, {2: b}, version=1,
                          kind=RowsKind.INSERT, decoders=decoders)
    assert "t_a" not in str(caught.value)


# --- the sink's schema versions ------------------------------------------------------------------


def _maps(*tables: tuple[str, list[Col]]) -> dict[str, TableMapEvent]:
    """TABLE_MAPs as the stream's cache makes them: tables of one shape share columns."""
    cache = TableMapCache()
    return {name: decode(cache, body(name, cols, table_id=100 + n))
            for n, (name, cols) in enumerate(tables)}


def _land(lake: str, b: StreamBuilder, maps: list[TableMapEvent]) -> ParquetSink:
    sink = ParquetSink(lake)
    sink.open()
    for n, table_map in enumerate(maps):
        width = len(table_map.columns)
        row = (n, f"r{n}", *([n] * (width - 2)))
        for item in (b.begin(), b.insert(table_map, [row]), b.commit()):
            sink.handle(item)
    sink.close()
    return sink


def _versions(lake: str) -> dict[str, list[str]]:
    out = {}
    for table in sorted(os.listdir(os.path.join(lake, "shop"))):
        out[table] = sorted(os.listdir(os.path.join(lake, "shop", table, "_schema")))
    return out


def _doc(lake: str, table: str, version: int) -> dict[str, Any]:
    with open(os.path.join(lake, "shop", table, "_schema", f"v{version}.json")) as f:
        doc: dict[str, Any] = json.load(f)
    return doc


def _landed(lake: str, table: str, version: int) -> tuple[dict[str, str], list[int], str]:
    """(column → Arrow type, ids, the table the files' metadata names) of one version."""
    directory = os.path.join(lake, "shop", table, f"schema_version={version}")
    paths = sorted(os.path.join(root, name) for root, _, names in os.walk(directory)
                   for name in names if name.endswith(".parquet"))
    tables = [pq.read_table(path) for path in paths]
    types = {f.name: str(f.type) for f in tables[0].schema if not f.name.startswith("_")}
    ids = sorted(i for t in tables for i in t["id"].to_pylist())
    named = {t.schema.metadata[b"binlake.table"].decode() for t in tables}
    assert len(named) == 1
    return types, ids, named.pop()


def test_same_shape_tables_land_with_their_own_versions_and_schema_files(tmp_path) -> None:
    lake = str(tmp_path / "lake")
    binary = [COLS[0], dataclasses.replace(COLS[1], charset=63)]
    unsigned = [dataclasses.replace(COLS[0], unsigned=True), COLS[1]]
    maps = _maps(("t_a", COLS), ("t_b", COLS), ("t_bin", binary), ("t_uns", unsigned))
    assert maps["t_b"].columns is maps["t_a"].columns
    b = StreamBuilder()
    # interleaved, so every per-table cache is asked for the other table in between
    order = ["t_a", "t_b", "t_bin", "t_uns", "t_b", "t_a", "t_uns", "t_bin"]
    _land(lake, b, [maps[name] for name in order])
    assert _versions(lake) == {"t_a": ["v1.json"], "t_b": ["v1.json"], "t_bin": ["v1.json"],
                               "t_uns": ["v1.json"]}
    assert _landed(lake, "t_a", 1) == ({"id": "int32", "v": "string"}, [0, 5], "t_a")
    assert _landed(lake, "t_b", 1) == ({"id": "int32", "v": "string"}, [1, 4], "t_b")
    assert _landed(lake, "t_bin", 1) == ({"id": "int32", "v": "binary"}, [2, 7], "t_bin")
    assert _landed(lake, "t_uns", 1) == ({"id": "int64", "v": "string"}, [3, 6], "t_uns")
    a_doc, b_doc = _doc(lake, "t_a", 1), _doc(lake, "t_b", 1)
    assert (a_doc["table"], b_doc["table"]) == ("t_a", "t_b")
    assert (a_doc["created"]["seq"], b_doc["created"]["seq"]) == (1, 2)
    del a_doc["table"], b_doc["table"], a_doc["created"], b_doc["created"]
    assert a_doc == b_doc
    assert [c["charset"] for c in _doc(lake, "t_bin", 1)["columns"]] == [None, 63]
    assert [c["flag_names"] for c in _doc(lake, "t_uns", 1)["columns"]][0] == [
        "UNSIGNED", "PRIMARY_KEY", "VISIBLE"]


def test_an_alter_gives_one_table_a_new_version_and_a_restart_resumes_each(tmp_path) -> None:
    lake = str(tmp_path / "lake")
    wider = [*COLS, Col(T.LONG, name="added")]
    maps = _maps(("t_a", COLS), ("t_b", COLS), ("t_a_altered", wider))
    altered = dataclasses.replace(maps["t_a_altered"], table="t_a")
    b = StreamBuilder()
    _land(lake, b, [maps["t_a"], maps["t_b"], altered, maps["t_b"], altered])
    assert _versions(lake) == {"t_a": ["v1.json", "v2.json"], "t_b": ["v1.json"]}
    assert _landed(lake, "t_a", 1) == ({"id": "int32", "v": "string"}, [0], "t_a")
    assert _landed(lake, "t_a", 2) == ({"id": "int32", "v": "string", "added": "int32"},
                                       [2, 4], "t_a")
    assert _landed(lake, "t_b", 1)[1] == [1, 3]
    # a restart against that lake: each table resumes its latest version, a new table of
    # either shape starts at 1, and an old shape coming back is a new version
    restarted = _maps(("t_b", COLS), ("t_c", wider), ("t_a", COLS))
    again = dataclasses.replace(restarted["t_c"], table="t_a")
    _land(lake, b, [restarted["t_b"], again, restarted["t_c"], restarted["t_a"]])
    assert _versions(lake) == {"t_a": ["v1.json", "v2.json", "v3.json"], "t_b": ["v1.json"],
                               "t_c": ["v1.json"]}
    assert _landed(lake, "t_b", 1)[1] == [0, 1, 3]
    assert _landed(lake, "t_a", 2)[1] == [1, 2, 4]
    assert _landed(lake, "t_a", 3) == ({"id": "int32", "v": "string"}, [3], "t_a")
    assert _landed(lake, "t_c", 1) == ({"id": "int32", "v": "string", "added": "int32"},
                                       [2], "t_c")
    assert _doc(lake, "t_a", 3)["created"]["seq"] == 9


def test_a_conversion_error_names_the_table_of_a_shared_shape(tmp_path) -> None:
    maps = _maps(("t_a", COLS), ("t_b", COLS))
    sink = ParquetSink(str(tmp_path / "lake"))
    sink.open()
    b = StreamBuilder()
    with pytest.raises(UnsupportedValue) as caught:
        for item in (b.begin(), b.insert(maps["t_a"], [(1, "x")]),
                     b.insert(maps["t_b"], [(object(), "x")]), b.commit()):
            sink.handle(item)
        sink.flush()
    assert (caught.value.table, caught.value.column) == ("shop.t_b", "id")


def test_a_restart_tells_a_table_of_the_lake_from_its_namesake_in_another_database(
        tmp_path) -> None:
    lake = str(tmp_path / "lake")
    wider = [*COLS, Col(T.LONG, name="added")]
    cache = TableMapCache()
    old = decode(cache, body("t_old", table_id=1))
    b = StreamBuilder()
    _land(lake, b, [old])
    # restarted: crm's t_old (a database the lake lacks) and shop's t_new are new tables,
    # shop's t_old resumes v1 (same shape), then gets v2 (wider)
    cache = TableMapCache()
    _land(lake, b, [decode(cache, body("t_old", schema="crm", table_id=2)),
                    decode(cache, body("t_old", table_id=1)),
                    decode(cache, body("t_new", table_id=3)),
                    decode(cache, body("t_old", wider, table_id=1))])
    assert _versions(lake) == {"t_new": ["v1.json"], "t_old": ["v1.json", "v2.json"]}
    assert sorted(os.listdir(os.path.join(lake, "crm", "t_old", "_schema"))) == ["v1.json"]
    assert _landed(lake, "t_old", 1)[1] == [0, 1]
    assert _landed(lake, "t_old", 2)[1] == [3]
    assert _landed(lake, "t_new", 1)[1] == [2]
    assert [_doc(lake, "t_old", v)["created"]["seq"] for v in (1, 2)] == [1, 5]


def test_versions_of_one_shape_share_its_resolution_and_keep_their_own_schemas() -> None:
    """A new table of a known shape is resolved by the identity of its columns tuple: the
    same names, types and fields as its first table's (not a copy), its own schema metadata,
    and ``staging_schema`` (made on first use) is its schema minus ``_commit_ts``, as a
    version read back from its ``_schema`` file has it."""
    from sinks.parquet.schema import TableVersion, VersionOrigin

    maps = _maps(("t_a", COLS), ("t_b", COLS))
    a = TableVersion.from_table_map(maps["t_a"], 1, VersionOrigin(seq=1), None)
    b = TableVersion.from_table_map(maps["t_b"], 3, VersionOrigin(seq=2), None)
    assert b.names is a.names and b.names == ("id", "v")
    assert b.data_fields is a.data_fields and b.native_tags is a.native_tags
    assert b.schema.metadata == {b"binlake.database": b"shop", b"binlake.table": b"t_b",
                                 b"binlake.schema_version": b"3"}
    assert b.schema.remove_metadata() == a.schema.remove_metadata()
    assert b.schema.names == ["id", "v", "_op", "_seq", "_row", "_gtid", "_gtid_domain",
                              "_gtid_server_id", "_gtid_uuid", "_gtid_tag", "_gtid_seq",
                              "_binlog_file", "_binlog_pos", "_commit_ts", "_missing",
                              "_json_diff", "_before"]
    staging = b.staging_schema
    assert staging is b.staging_schema  # made once
    assert staging.equals(b.schema.remove(b.commit_ts_index), check_metadata=True)
    assert staging.metadata == b.schema.metadata
    again = TableVersion.from_json(json.loads(b.to_json_bytes()), None)
    assert again.schema.equals(b.schema, check_metadata=True)
    assert again.staging_schema.equals(staging, check_metadata=True)
    assert (again.signature, again.names, again.commit_ts_index) == (
        b.signature, b.names, b.commit_ts_index)


@pytest.mark.parametrize(("database", "table"), [("shop", "t"), ("_x", ".y"), ("a/b", "c%d"),
                                                 ("", "\u00e9t\u00e9")])
def test_lake_paths_are_spelled_as_posixpath_joins_them(database: str, table: str) -> None:
    """``table_dir``, ``schema_file`` and ``part_file`` build their strings directly (a new
    table names its directory several times): the very paths the joins made."""
    import posixpath

    from sinks.parquet import layout as L

    table_dir = posixpath.join(L.dir_name(database), L.dir_name(table))
    assert L.table_dir(database, table) == table_dir
    assert L.schema_file(database, table, 7) == posixpath.join(table_dir, "_schema", "v7.json")
    assert L.part_file(database, table, 2, "2026-01-01", 42, 3) == posixpath.join(
        table_dir, "schema_version=2", "commit_date=2026-01-01",
        "part-0000000000000042-003.parquet")
    assert L.staged_file(12) == "_staging/part-00000012.parquet"
