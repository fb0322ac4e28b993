"""The TABLE_MAP and row-decoder caches: one parse and one generated decoder per table
definition, however many TABLE_MAPs repeat it (servers send one before every statement), owned
by the stream that decodes (no process-wide state, no mutation of the frozen TableMapEvent)."""

from __future__ import annotations

import dataclasses
import struct

import pytest

from protocol.binlog.coltypes import FieldType as T
from protocol.binlog.enrich import enrich_table_map
from protocol.binlog.model import RowsEvent, RowsKind, TableMapEvent
from protocol.binlog.rows import DECODER_CACHE_SIZE, DecoderCache, TableDecoder, decode_rows_event
from protocol.binlog.stream import EventStream
from protocol.binlog.tablemap import TABLE_MAP_CACHE_SIZE, TableMapCache
from tests.unit.rowbuild import Col, header, i32, image, rows_body, table_map_body
from tests.unit.test_schema_source import described, no_log_map

COLS = [Col(T.LONG, name="id", nullable=False), Col(T.VARCHAR, b"\x40\x00", name="v")]


def table_map(maps: TableMapCache, table_id: int, cols: list[Col] = COLS,
              position: int = 100) -> TableMapEvent:
    character = [i for i, c in enumerate(cols) if c.type_code == T.VARCHAR]
    body = table_map_body(cols, table_id=table_id, table="cache_t", character=character)
    return maps.decode(header(19, position), memoryview(body), 8)


def insert(decoders: DecoderCache, table: TableMapEvent, value: int) -> list[object]:
    body = rows_body(2, [image([i32(value), b"\x02hi"])], table_id=table.table_id)
    event = decode_rows_event(header(23), memoryview(body), 8, {table.table_id: table},
                              version=1, kind=RowsKind.INSERT, decoders=decoders)
    return [column[0] for column in event.after or ()]


def test_a_repeated_definition_shares_columns_and_decoder_but_not_id_or_header() -> None:
    maps, decoders = TableMapCache(), DecoderCache()
    first = table_map(maps, 7001)
    assert insert(decoders, first, 1) == [1, b"hi"]  # charset 63 (binary): bytes
    assert decoders.built == 1
    again = table_map(maps, 7002, position=500)
    assert again.table_id == 7002 and again.header.position == 500
    assert again.columns is first.columns
    assert decoders.decoder_for(again) is decoders.decoder_for(first)
    assert insert(decoders, again, 2) == [2, b"hi"]
    assert decoders.built == 1 and len(maps) == 1
    assert again == TableMapEvent(again.header, 7002, first.flags, first.schema, first.table,
                                  first.columns, first.primary_key, first.has_full_metadata,
                                  first.optional_metadata)


def test_the_same_definition_with_4_byte_ids_is_its_own_entry() -> None:
    maps = TableMapCache()
    body = table_map_body(COLS, table_id=7003, table="cache_t")
    six = maps.decode(header(), memoryview(body), 8)
    four = maps.decode(header(), memoryview(body[2:]), 6)  # drop 2 bytes of the 6-byte id
    assert six.table_id == 7003 and four.table_id == (7003 >> 16)
    assert four.columns == six.columns
    assert len(maps) == 2


def test_a_body_repeated_byte_for_byte_gives_the_same_event_under_its_own_header() -> None:
    # the stream hands bodies over as bytes: a repeat is then found by the whole body
    maps = TableMapCache()
    body = table_map_body(COLS, table_id=7005, table="cache_t")
    first = maps.decode(header(19, 100), body, 8)
    again = maps.decode(header(19, 900), bytes(bytearray(body)), 8)
    assert again == dataclasses.replace(first, header=header(19, 900))
    assert again.columns is first.columns and again.table_id == 7005
    # ... but only under the id width and flavour it was parsed with
    assert maps.decode(header(), body, 10).table_id == 7005
    assert maps.decode(header(), body[2:], 6).table_id == 7005 >> 16
    mariadb = maps.decode(header(), body, 8, mariadb=True)
    assert mariadb == maps.decode(header(), memoryview(body), 8, mariadb=True)
    assert len(maps) == 4  # post-header 8 and 10, 6, MariaDB's 8


def test_an_altered_definition_gets_its_own_entry_and_decoder() -> None:
    maps, decoders = TableMapCache(), DecoderCache()
    before = table_map(maps, 7010)
    insert(decoders, before, 1)
    altered = table_map(maps, 7010, COLS + [Col(T.LONGLONG, name="added")])
    assert len(altered.columns) == 3 and decoders.built == 1  # parsing builds no decoder
    assert decoders.decoder_for(altered) is not decoders.decoder_for(before)
    assert decoders.built == 2
    # the old definition is still known
    assert decoders.decoder_for(table_map(maps, 7010)) is decoders.decoder_for(before)
    assert decoders.built == 2 and len(maps) == 2


def test_the_caches_are_bounded() -> None:
    maps = TableMapCache()
    for n in range(TABLE_MAP_CACHE_SIZE + 10):
        table_map(maps, 8000 + n, [Col(T.LONG, name=f"c{n}")])
    assert len(maps) == TABLE_MAP_CACHE_SIZE
    decoders = DecoderCache()
    for n in range(DECODER_CACHE_SIZE + 10):
        decoders.decoder_for(table_map(maps, 9000, [Col(T.LONG, name=f"d{n}")]))
    assert len(decoders) == DECODER_CACHE_SIZE
    assert decoders.built == DECODER_CACHE_SIZE + 10


def test_enriched_maps_share_one_decoder_per_enriched_definition() -> None:
    decoders = DecoderCache()
    first = enrich_table_map(no_log_map(), described()).table
    second = enrich_table_map(no_log_map(), described()).table
    assert first.columns == second.columns and first.columns is not second.columns
    assert decoders.decoder_for(first) is decoders.decoder_for(second)
    assert decoders.built == 1
    # the plain TABLE_MAP keeps the plain decoder: names/signedness differ
    assert decoders.decoder_for(no_log_map()) is not decoders.decoder_for(first)
    assert decoders.built == 2


def test_same_columns_under_another_name_get_their_own_decoder() -> None:
    decoders = DecoderCache()
    table = table_map(TableMapCache(), 7030)
    renamed = dataclasses.replace(table, table="other_t")  # the same columns tuple
    assert renamed.columns is table.columns
    assert decoders.decoder_for(renamed) is not decoders.decoder_for(table)
    assert decoders.decoder_for(renamed).table.table == "other_t"


def test_a_table_map_is_never_mutated_and_carries_no_decoder() -> None:
    decoders = DecoderCache()
    table = table_map(TableMapCache(), 7020)
    fields_before = {f.name: getattr(table, f.name) for f in dataclasses.fields(table)}
    assert insert(decoders, table, 5) == [5, b"hi"]
    assert {f.name: getattr(table, f.name) for f in dataclasses.fields(table)} == fields_before
    assert "decoder" not in fields_before
    with pytest.raises(dataclasses.FrozenInstanceError):
        table.columns = ()  # type: ignore[misc]
    # without a cache a decoder is generated for the call and dropped
    body = rows_body(2, [image([i32(6), b"\x02hi"])], table_id=table.table_id)
    event = decode_rows_event(header(23), memoryview(body), 8, {table.table_id: table},
                              version=1, kind=RowsKind.INSERT)
    assert [column[0] for column in event.after or ()] == [6, b"hi"]


def _event(type_code: int, body: bytes, log_pos: int) -> bytes:
    size = 19 + len(body)
    return struct.pack("<IBIIIH", 0, type_code, 1, size, log_pos, 0) + body


def test_each_stream_owns_its_caches(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stream parses a repeated TABLE_MAP once and generates its row decoder once; a second
    stream starts from nothing (no process-wide state between them)."""
    built: list[TableDecoder] = []
    original = TableDecoder.__init__

    def counting(self: TableDecoder, table: TableMapEvent) -> None:
        original(self, table)
        built.append(self)

    monkeypatch.setattr(TableDecoder, "__init__", counting)
    tm = table_map_body(COLS, table_id=7040, table="cache_t", character=[1])
    rows = rows_body(2, [image([i32(1), b"\x02hi"])], table_id=7040, flags=1)  # STMT_END
    for _stream in range(2):
        stream = EventStream(checksum=False)
        values = []
        for n in range(3):  # three statements, each TABLE_MAP + rows
            stream.feed(_event(19, tm, 1000 + n))
            (event,) = stream.feed(_event(23, rows, 2000 + n))
            assert isinstance(event, RowsEvent)
            values.append(event.after[0][0] if event.after else None)
        assert values == [1, 1, 1]
        assert len(built) == 1
        built.clear()
