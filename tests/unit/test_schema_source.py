"""A schema source for TABLE_MAPs without FULL metadata: the consistency check and enrichment
(``protocol.binlog.enrich``), the event stream's hooks, and ``replica.core.schema_source`` against a
scripted connection."""

from __future__ import annotations

import logging
import struct
from dataclasses import replace
from typing import Any

import pytest
import trio

from protocol.binlog.ddl import classify
from protocol.binlog.enrich import (
    ColumnDescription,
    TableDescription,
    collation_for_charset,
    enrich_table_map,
    inconsistency,
    with_display_widths,
)
from protocol.binlog.model import BinlogPosition, ColumnFlag, RowsEvent, TableMapEvent
from protocol.binlog.rows import DecoderCache
from protocol.binlog.stream import EventStream
from protocol.binlog.tablemap import decode_table_map
from protocol.binlog.transactions import Statement
from protocol.errors import ServerError
from replica.core.schema_source import (
    SchemaSource,
    columns_query,
    describe_rows,
    parse_labels,
    primary_key_query,
)

from .rowbuild import Col, header, image, rows_body, table_map_body
from .test_binlog_events import make_event, payload_event

LONG, VARCHAR, STRING, BLOB, NEWDECIMAL, DATETIME2 = 3, 15, 254, 252, 246, 18
UTF8MB4 = 45

# id INT UNSIGNED NOT NULL PK, name VARCHAR(20) utf8mb4, e ENUM('a','b'), note TEXT,
# price DECIMAL(10,2), at DATETIME(3)
COLS = [
    Col(LONG, nullable=False, name="id", unsigned=True),
    Col(VARCHAR, struct.pack("<H", 80), name="name", charset=UTF8MB4),
    Col(STRING, bytes([0xF7, 1]), name="e", charset=UTF8MB4, labels=("a", "b")),
    Col(BLOB, b"\x02", name="note", charset=UTF8MB4),
    Col(NEWDECIMAL, bytes([10, 2]), name="price"),
    Col(DATETIME2, b"\x03", name="at"),
]


def described(**changes: Any) -> TableDescription:
    columns = [
        ColumnDescription("id", "int", nullable=False, unsigned=True, precision=None),
        ColumnDescription("name", "varchar", nullable=True, charset="utf8mb4", collation=UTF8MB4,
                          octet_length=80),
        ColumnDescription("e", "enum", nullable=True, charset="utf8mb4", collation=UTF8MB4,
                          enum_values=("a", "b"), octet_length=4),
        ColumnDescription("note", "text", nullable=True, charset="utf8mb4", collation=UTF8MB4,
                          octet_length=65535),
        ColumnDescription("price", "decimal", nullable=True, precision=10, scale=2),
        ColumnDescription("at", "datetime", nullable=True, fsp=3),
    ]
    for name, change in changes.items():
        index = next(i for i, c in enumerate(columns) if c.name == name)
        columns[index] = replace(columns[index], **change)
    return TableDescription("db", "t", tuple(columns), primary_key=("id",))


def no_log_map(cols: list[Col] = COLS, **kwargs: Any) -> TableMapEvent:
    """The TABLE_MAP a MariaDB with binlog_row_metadata=NO_LOG writes: types only."""
    return decode_table_map(header(), table_map_body(cols, names=False, **kwargs), 8)


def minimal_map(cols: list[Col] = COLS) -> TableMapEvent:
    """binlog_row_metadata=MINIMAL: signedness and charsets, no names or labels."""
    return decode_table_map(header(), table_map_body(
        cols, names=False, numeric=[0, 4], character=[1, 3]), 8)


# --- the consistency check -----------------------------------------------------------------------


def test_a_consistent_description_fills_in_what_no_log_left_out() -> None:
    table_map = no_log_map()
    assert not table_map.has_full_metadata and table_map.columns[1].charset is None
    result = enrich_table_map(table_map, described())
    assert result.applied and result.reason is None
    enriched = result.table
    assert [c.name for c in enriched.columns] == ["id", "name", "e", "note", "price", "at"]
    assert enriched.has_full_metadata and enriched.described_by == "information_schema"
    decoders = DecoderCache()  # rebuilt for the new names, signedness and charsets
    assert decoders.decoder_for(enriched) is not decoders.decoder_for(table_map)
    assert enriched.primary_key == (0,)
    id_, name, e, note, price, at = enriched.columns
    assert id_.unsigned and id_.flags & ColumnFlag.PRIMARY_KEY and not id_.nullable
    assert name.charset == UTF8MB4 and note.charset == UTF8MB4
    assert e.enum_values == ("a", "b") and e.charset == UTF8MB4
    assert (price.precision, price.scale) == (10, 2) and at.scale == 3
    # what the binlog said is kept
    assert [(c.type_code, c.meta) for c in enriched.columns] == [
        (c.type_code, c.meta) for c in table_map.columns]
    assert enriched.header == table_map.header and enriched.table_id == table_map.table_id


def test_binary_columns_get_the_binary_collation() -> None:
    cols = [Col(VARCHAR, struct.pack("<H", 7), name="vb"), Col(BLOB, b"\x04", name="lb"),
            Col(STRING, bytes([0xFE, 16]), name="u")]
    description = TableDescription("db", "t", (
        ColumnDescription("vb", "varbinary", True, octet_length=7),
        ColumnDescription("lb", "longblob", True),
        ColumnDescription("u", "binary", True, octet_length=16)))
    enriched = enrich_table_map(no_log_map(cols), description).table
    assert all(c.charset == 63 and c.flags & ColumnFlag.BINARY for c in enriched.columns)


@pytest.mark.parametrize("description, expected", [
    (TableDescription("db", "t", described().columns[:5]), "the binlog has 6 columns, the schema 5"),
    (TableDescription("db", "other", described().columns), "description is of db.other"),
    (described(id={"data_type": "bigint"}), "column 1 ('id'): the binlog has LONG"),
    (described(name={"data_type": "char"}), "column 2 ('name')"),
    (described(name={"octet_length": 40}), "VARCHAR(80 bytes), the schema varchar of 40 bytes"),
    (described(price={"precision": 12}), "DECIMAL(10,2), the schema decimal(12,2)"),
    (described(at={"fsp": 6}), "the schema datetime(6)"),
    (described(note={"data_type": "mediumtext"}), "BLOB/TEXT with a 2-byte length"),
    (described(e={"enum_values": tuple(str(i) for i in range(300))}), "column 3 ('e')"),
    (described(id={"nullable": True}), "the binlog says NOT NULL, the schema the opposite"),
    (described(price={"nullable": False}), "the binlog says NULL"),
])
def test_an_inconsistent_description_is_not_applied(description: TableDescription,
                                                    expected: str) -> None:
    table_map = no_log_map()
    result = enrich_table_map(table_map, description)
    assert not result.applied and result.table is table_map
    assert result.reason is not None and expected in result.reason, result.reason


def test_minimal_metadata_is_checked_and_kept() -> None:
    table_map = minimal_map()
    assert inconsistency(table_map, described()) is None
    # signedness the binlog sent disagrees: an ALTER ... UNSIGNED after this event
    assert "says UNSIGNED" in (inconsistency(table_map, described(id={"unsigned": False})) or "")
    # charset the binlog sent disagrees (binary vs text, and text vs text)
    reason = inconsistency(table_map, described(name={"data_type": "varbinary", "charset": None,
                                                      "collation": None}))
    assert reason is not None and "collation 45" in reason
    reason = inconsistency(table_map, described(name={"charset": "latin1", "collation": 8}))
    assert reason is not None and "latin1" in reason
    # the same charset under another collation id is fine; the binlog's id is kept
    enriched = enrich_table_map(table_map, described(name={"collation": 224})).table
    assert enriched.columns[1].charset == UTF8MB4


def test_without_signedness_metadata_signed_vs_unsigned_cannot_be_checked() -> None:
    # NO_LOG: the binlog says nothing about signedness, so the description decides
    enriched = enrich_table_map(no_log_map(), described(id={"unsigned": False})).table
    assert not enriched.columns[0].unsigned


def test_a_full_table_map_is_left_alone() -> None:
    full = decode_table_map(header(), table_map_body(COLS, numeric=[0, 4], character=[1, 3],
                                                     enums=[2], pk=[0]), 8)
    result = enrich_table_map(full, described(id={"data_type": "bigint"}))
    assert result.table is full and result.reason == "the TABLE_MAP already names its columns"


def test_collation_for_charset() -> None:
    assert collation_for_charset("utf8mb4") == 45
    assert collation_for_charset("UTF8") == 33 == collation_for_charset("utf8mb3")
    assert collation_for_charset("latin1") == 5
    assert collation_for_charset("no-such") is None


# --- the event stream's hooks --------------------------------------------------------------------


def _events(cols: list[Col] = COLS) -> tuple[bytes, bytes]:
    table_map = make_event(19, table_map_body(cols, names=False), log_pos=0, crc=False)
    row = image([struct.pack("<I", 4_000_000_000), b"\x03h\xc3\xa9", b"\x02", b"\x02\x00hi",
                 bytes.fromhex("800000010a"), bytes.fromhex("99b244310503e8")])
    rows = make_event(23, rows_body(len(cols), [row]), crc=False)
    return table_map, rows


def _stream(**kwargs: Any) -> EventStream:
    return EventStream(file="bin.000001", checksum=False, **kwargs)


def test_set_table_map_replaces_the_map_the_next_rows_use() -> None:
    raw_map, raw_rows = _events()
    stream = _stream()
    (table_map,) = stream.feed(raw_map)
    assert isinstance(table_map, TableMapEvent)
    enriched = enrich_table_map(table_map, described()).table
    stream.set_table_map(enriched)
    (rows,) = stream.feed(raw_rows)
    assert isinstance(rows, RowsEvent) and rows.table is enriched
    (row,) = rows.rows_after()
    assert row["id"] == 4_000_000_000 and row["name"] == "hé" and row["e"] == "b"
    assert row["note"] == "hi"
    # without it: signed ints, bytes and ENUM numbers under positional names
    stream = _stream()
    stream.feed(raw_map)
    (rows,) = stream.feed(raw_rows)
    assert rows.rows_after()[0]["@1"] == 4_000_000_000 - 2**32
    assert rows.rows_after()[0]["@2"] == "hé".encode() and rows.rows_after()[0]["@3"] == 2


def test_set_table_map_refuses_an_unregistered_table_id() -> None:
    stream = _stream()
    with pytest.raises(KeyError):
        stream.set_table_map(no_log_map())


def test_table_map_hook_enriches_inside_one_transaction_payload() -> None:
    raw_map, raw_rows = _events()
    seen: list[TableMapEvent] = []

    def hook(table_map: TableMapEvent) -> TableMapEvent:
        seen.append(table_map)
        return enrich_table_map(table_map, described()).table

    stream = _stream(table_map_hook=hook)
    payload = payload_event([raw_map, raw_rows])
    assert stream.tables_mapped_by(payload) == [("db", "t")]
    out = stream.feed(payload)
    rows = out[-1]
    assert isinstance(rows, RowsEvent) and rows.table.columns[0].name == "id"
    assert rows.rows_after()[0]["name"] == "hé"
    assert len(seen) == 1 and seen[0].columns[0].name is None


def test_tables_mapped_by_peeks_without_feeding() -> None:
    raw_map, raw_rows = _events()
    stream = _stream()
    assert stream.tables_mapped_by(raw_map) == [("db", "t")]
    assert stream.table_maps == {} and stream.position.pos == 4
    assert stream.tables_mapped_by(raw_rows) == []
    assert stream.tables_mapped_by(raw_map[:25]) == []  # truncated: feed reports it
    assert stream.tables_mapped_by(b"") == []
    corrupt = bytearray(payload_event([raw_map]))
    corrupt[-10] ^= 0xFF
    assert stream.tables_mapped_by(bytes(corrupt)) == []


# --- information_schema rows ---------------------------------------------------------------------


@pytest.mark.parametrize("column_type, labels", [
    ("enum('a','b')", ("a", "b")),
    ("enum('it''s','x,y','b\\\\c','')", ("it's", "x,y", "b\\c", "")),
    ("set('a\\nb','\\0','\\'')", ("a\nb", "\0", "'")),
    ("set('p')", ("p",)),
    ("enum('''')", ("'",)),
    ("enum('é','😀')", ("é", "😀")),
])
def test_parse_labels(column_type: str, labels: tuple[str, ...]) -> None:
    assert parse_labels(column_type) == labels


@pytest.mark.parametrize("bad", ["enum", "enum(a)", "enum('a'", "enum('a',)", "enum('a' 'b')",
                                 "enum('a\\')"])
def test_parse_labels_rejects_what_is_not_a_label_list(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_labels(bad)


def _row(name: str, data_type: str, column_type: str, nullable: str = "YES",
         charset: str | None = None, collation: str | None = None, key: str = "",
         extra: str = "", precision: str | None = None, scale: str | None = None,
         fsp: str | None = None, octets: str | None = None, table: str = "t"
         ) -> tuple[str | None, ...]:
    return ("db", table, name, data_type, column_type, nullable, charset, collation, key, extra,
            precision, scale, fsp, octets)


INFORMATION_SCHEMA_ROWS = [
    _row("id", "int", "int(10) unsigned", "NO", key="PRI", precision="10", scale="0"),
    _row("name", "varchar", "varchar(20)", charset="utf8mb4", collation=None, octets="80"),
    _row("e", "enum", "enum('a','b')", charset="utf8mb4", collation="224", octets="4"),
    _row("note", "text", "text", charset="utf8mb4", collation="45", octets="65535"),
    _row("price", "decimal", "decimal(10,2)", precision="10", scale="2"),
    _row("at", "datetime", "datetime(3)", fsp="3"),
    _row("ID", "int", "int(11)", table="T"),  # another table, on a case-insensitive server
]


def test_describe_rows() -> None:
    description = describe_rows("db", "t", INFORMATION_SCHEMA_ROWS,
                                [("db", "t", "id"), ("db", "T", "ID")])
    assert description is not None
    assert [c.name for c in description.columns] == ["id", "name", "e", "note", "price", "at"]
    assert description.primary_key == ("id",)
    id_, name, e, _, price, at = description.columns
    assert id_.unsigned and not id_.nullable and id_.precision is None
    assert name.collation == 45  # no COLLATIONS.ID (MariaDB 11 UCA-14): from the charset
    assert e.collation == 224 and e.enum_values == ("a", "b")
    assert (price.precision, price.scale, at.fsp) == (10, 2, 3)
    assert enrich_table_map(no_log_map(), description).applied
    assert describe_rows("db", "gone", INFORMATION_SCHEMA_ROWS, []) is None


def test_describe_rows_flags() -> None:
    description = describe_rows("db", "t", [
        _row("u", "int", "int(11)", key="UNI"),
        _row("g", "int", "int(11)", extra="VIRTUAL GENERATED"),
        _row("h", "int", "int(11)", extra="INVISIBLE"),
        _row("s", "tinyint", "tinyint(3) unsigned zerofill"),
        _row("v", "varchar", "varchar(9)", charset="utf8mb3", octets="27"),
    ], [])
    assert description is not None
    u, g, h, s, v = description.columns
    assert u.unique and g.generated and h.invisible and s.unsigned
    assert v.collation == 33


def test_display_widths_from_column_type() -> None:
    """MariaDB prints every integer's width, MySQL 8.0.19+ only tinyint(1)'s."""
    description = describe_rows("db", "t", [
        _row("b", "tinyint", "tinyint(1)"), _row("m", "tinyint", "tinyint"),
        _row("u", "tinyint", "tinyint(3) unsigned zerofill"), _row("i", "int", "int(11)"),
        _row("c", "char", "char(1)", charset="utf8mb4", octets="4")], [])
    assert description is not None
    assert [c.display_width for c in description.columns] == [1, None, 3, 11, None]


def test_display_widths_complete_a_full_table_map() -> None:
    full = decode_table_map(header(), table_map_body(COLS, numeric=[0, 4], character=[1, 3],
                                                     enums=[2], pk=[0]), 8)
    result = with_display_widths(full, described(id={"display_width": 10}))
    assert result.applied
    assert [c.display_width for c in result.table.columns] == [10, None, None, None, None, None]
    assert [c.name for c in result.table.columns] == [c.name for c in full.columns]
    # a description of other columns (an ALTER since): nothing taken, the reason said
    renamed = described(id={"name": "ident", "display_width": 1})
    result = with_display_widths(full, renamed)
    assert result.table is full and not result.applied
    assert result.reason == "its columns are not the ones information_schema lists now"
    # and a NO_LOG map gets them with the names
    enriched = enrich_table_map(no_log_map(), described(id={"display_width": 1})).table
    assert enriched.columns[0].display_width == 1


def test_queries_quote_names_as_hex() -> None:
    query = columns_query("d'b", "t`\\")
    assert "d'b" not in query and "X'642762'" in query and "X'74605c'" in query
    assert "INDEX_NAME = 'PRIMARY'" in primary_key_query("db", "t")


# --- the schema source ---------------------------------------------------------------------------


class ScriptedConnection:
    """Answers information_schema queries from a dict of tables: name -> (columns, pk)."""

    def __init__(self, tables: dict[str, tuple[list[tuple[str | None, ...]], list[str]]],
                 fail: Exception | None = None) -> None:
        self.tables = tables
        self.fail = fail
        self.queries: list[str] = []
        self.closed = False

    async def query(self, sql: str) -> list[tuple[str | None, ...]]:
        await trio.lowlevel.checkpoint()
        self.queries.append(sql)
        if self.fail is not None:
            raise self.fail
        for name, (columns, pk) in self.tables.items():
            if f"X'{name.encode().hex()}'" in sql:
                if "STATISTICS" in sql:
                    return [("db", name, c) for c in pk]
                return columns
        return []

    async def close(self) -> None:
        self.closed = True


class Opener:
    def __init__(self, conn: ScriptedConnection) -> None:
        self.conn = conn
        self.opened = 0

    async def __call__(self, options: object) -> ScriptedConnection:
        self.opened += 1
        return self.conn


def _source(conn: ScriptedConnection, **kwargs: Any) -> tuple[SchemaSource, Opener]:
    opener = Opener(conn)
    return SchemaSource(object(), opener=opener, **kwargs), opener  # type: ignore[arg-type]


def _statement(query: str, schema: str = "db") -> Statement:
    return Statement(schema, query, classify(query) is not None, BinlogPosition("b.1", 4), 0)


async def test_source_caches_until_ddl_for_the_table(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "binlake.schema")
    conn = ScriptedConnection({"t": (INFORMATION_SCHEMA_ROWS[:6], ["id"]),
                               "u": (INFORMATION_SCHEMA_ROWS[:1], [])})
    source, opener = _source(conn)
    assert opener.opened == 0  # lazily: a FULL server never sees the connection
    await source.prepare([("db", "t"), ("db", "t")])
    assert opener.opened == 1 and len(conn.queries) == 2  # columns + primary key
    first = source.enrich(no_log_map())
    second = source.enrich(no_log_map())
    assert first.columns[0].name == second.columns[0].name == "id"
    assert first is not second and source.enriched == 2
    warnings = [r.getMessage() for r in caplog.records]
    assert warnings == ["binlog_row_metadata is not FULL: column names for db.t come from "
                        "information_schema as of now"]
    await source.describe("db", "u")
    queries = len(conn.queries)

    source.note_statement(_statement("INSERT INTO t VALUES (1)"))  # DML: nothing to forget
    source.note_statement(_statement("ALTER TABLE t ADD COLUMN x INT"))
    await source.prepare([("db", "t"), ("db", "u")])
    assert len(conn.queries) == queries + 2  # t again, u still cached
    source.note_statement(_statement("CREATE TRIGGER tr BEFORE INSERT ON u FOR EACH ROW SET @a=1"))
    await source.prepare([("db", "t"), ("db", "u")])
    assert len(conn.queries) == queries + 6  # no table placed: everything forgotten
    source.note_statement(_statement("DROP DATABASE db"))
    await source.prepare([("db", "u")])
    assert len(conn.queries) == queries + 8
    await source.prepare([("db", "t"), ("other", "x")])
    queries = len(conn.queries)
    source.note_statement(_statement("RENAME TABLE db.u TO db.u2, db.t TO db.u"))
    assert source.enrich(no_log_map()).columns[0].name is None  # every pair is forgotten
    await source.prepare([("other", "x")])
    assert len(conn.queries) == queries  # other tables are not
    await source.aclose()
    assert conn.closed


async def test_source_leaves_a_mismatching_map_unnamed_and_warns_once(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "binlake.schema")
    # today the table has a seventh column: yesterday's TABLE_MAP has six
    today = [*INFORMATION_SCHEMA_ROWS[:6], _row("added", "int", "int(11)")]
    source, _ = _source(ScriptedConnection({"t": (today, ["id"])}))
    await source.prepare([("db", "t")])
    for _ in range(3):
        table_map = no_log_map()
        assert source.enrich(table_map) is table_map
    assert source.unmatched == 3 and source.enriched == 0
    (warning,) = [r.getMessage() for r in caplog.records]
    assert "db.t at bin.000001:100" in warning and "6 columns, the schema 7" in warning
    assert "stay unnamed" in warning


async def test_source_unknown_table_and_failures(caplog: pytest.LogCaptureFixture,
                                                 autojump_clock: trio.abc.Clock) -> None:
    caplog.set_level(logging.WARNING, "binlake.schema")
    conn = ScriptedConnection({})
    source, opener = _source(conn, retry_after=30)
    assert await source.describe("db", "t") is None  # dropped since: no rows
    assert "not in information_schema" in caplog.records[-1].getMessage()
    assert source.enrich(no_log_map()).columns[0].name is None
    await source.describe("db", "t")
    assert len(conn.queries) == 1  # the absence is cached too

    conn.fail = ServerError(1142, "42000", "SELECT command denied")
    assert await source.describe("db", "x") is None
    assert "denied" in caplog.records[-1].getMessage() and conn.closed
    await source.describe("db", "x")
    assert len(conn.queries) == 2  # not asked again before retry_after
    await trio.sleep(31)
    conn.fail, conn.closed = None, False
    conn.tables["x"] = (INFORMATION_SCHEMA_ROWS[:6], [])
    # the x rows answer for db.x only if they say so
    conn.tables["x"] = ([("db", "x", *r[2:]) for r in INFORMATION_SCHEMA_ROWS[:6]], [])
    description = await source.describe("db", "x")
    assert description is not None and opener.opened == 2  # a new connection


async def test_a_cancelled_query_drops_the_connection() -> None:
    conn = ScriptedConnection({"t": (INFORMATION_SCHEMA_ROWS[:6], ["id"])})
    source, opener = _source(conn)
    with trio.CancelScope() as scope:
        scope.cancel()
        await source.describe("db", "t")
    assert conn.closed
    await source.describe("db", "t")
    assert opener.opened == 2
