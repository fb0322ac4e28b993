"""The TABLE_MAP and row-decoder caches: one parse and one generated decoder per table
definition, however many TABLE_MAPs repeat it (servers send one before every statement)."""

from __future__ import annotations

from protocol.binlog import rows as rows_module
from protocol.binlog import tablemap as tablemap_module
from protocol.binlog.coltypes import FieldType as T
from protocol.binlog.enrich import enrich_table_map
from protocol.binlog.model import RowsKind, TableMapEvent
from protocol.binlog.rows import decode_rows_event, decoder_for
from protocol.binlog.tablemap import decode_table_map
from tests.unit.rowbuild import Col, header, i32, image, rows_body, table_map_body
from tests.unit.test_schema_source import described, no_log_map

COLS = [Col(T.LONG, name="id", nullable=False), Col(T.VARCHAR, b"\x40\x00", name="v")]


def table_map(table_id: int, cols: list[Col] = COLS, position: int = 100) -> TableMapEvent:
    character = [i for i, c in enumerate(cols) if c.type_code == T.VARCHAR]
    body = table_map_body(cols, table_id=table_id, table="cache_t", character=character)
    return decode_table_map(header(19, position), memoryview(body), 8)


def insert(table: TableMapEvent, value: int) -> list[object]:
    body = rows_body(2, [image([i32(value), b"\x02hi"])], table_id=table.table_id)
    event = decode_rows_event(header(23), memoryview(body), 8, {table.table_id: table},
                              version=1, kind=RowsKind.INSERT)
    return [column[0] for column in event.after or ()]


def test_a_repeated_definition_shares_columns_and_decoder_but_not_id_or_header() -> None:
    first = table_map(7001)
    assert insert(first, 1) == [1, b"hi"]  # charset 63 (binary): bytes
    again = table_map(7002, position=500)
    assert again.table_id == 7002 and again.header.position == 500
    assert again.columns is first.columns
    assert again.decoder is first.decoder is not None
    assert insert(again, 2) == [2, b"hi"]
    assert again == TableMapEvent(again.header, 7002, first.flags, first.schema, first.table,
                                  first.columns, first.primary_key, first.has_full_metadata,
                                  first.optional_metadata)


def test_the_same_definition_with_4_byte_ids_is_its_own_entry() -> None:
    body = table_map_body(COLS, table_id=7003, table="cache_t")
    six = decode_table_map(header(), memoryview(body), 8)
    four = decode_table_map(header(), memoryview(body[2:]), 6)  # drop 2 bytes of the 6-byte id
    assert six.table_id == 7003 and four.table_id == (7003 >> 16)
    assert four.columns == six.columns


def test_an_altered_definition_gets_its_own_entry_and_decoder() -> None:
    before = table_map(7010)
    insert(before, 1)
    altered = table_map(7010, COLS + [Col(T.LONGLONG, name="added")])
    assert len(altered.columns) == 3 and altered.decoder is None
    assert decoder_for(altered) is not decoder_for(before)
    assert table_map(7010).decoder is decoder_for(before)  # the old definition is still known


def test_the_cache_is_bounded() -> None:
    limit = tablemap_module.TABLE_MAP_CACHE_SIZE
    for n in range(limit + 10):
        table_map(8000 + n, [Col(T.LONG, name=f"c{n}")])
    assert len(tablemap_module._cache) == limit
    for n in range(rows_module.DECODER_CACHE_SIZE + 10):
        decoder_for(table_map(9000, [Col(T.LONG, name=f"d{n}")]))
    assert len(rows_module._decoders) == rows_module.DECODER_CACHE_SIZE


def test_enriched_maps_share_one_decoder_per_enriched_definition() -> None:
    first = enrich_table_map(no_log_map(), described()).table
    second = enrich_table_map(no_log_map(), described()).table
    assert first.decoder is None and second.decoder is None  # enrich drops the cached one
    assert first.columns == second.columns and first.columns is not second.columns
    assert decoder_for(first) is decoder_for(second)
    # the plain TABLE_MAP keeps the plain decoder: names/signedness differ
    assert decoder_for(no_log_map()) is not decoder_for(first)


def test_a_foreign_object_in_the_decoder_slot_is_replaced() -> None:
    table = table_map(7020)
    object.__setattr__(table, "decoder", object())
    assert type(decoder_for(table)) is rows_module.TableDecoder
    assert insert(table, 5) == [5, b"hi"]
