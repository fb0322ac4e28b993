"""Binlog header, events, compression, stream tracking and the file reader.

Inputs: the spec's own examples (seed 004) and binlog files captured from real servers
(``fixtures/binlogs``, see its README). Parsers are fed whole, byte by byte, with trailing
bytes, truncated and bit-flipped; bad input must give a ``ProtocolError``.
"""

from __future__ import annotations

import os
import random
import struct
import zlib
from pathlib import Path

import pytest
import zstandard

from protocol.binlog import compression, events
from protocol.binlog.events import EventType
from protocol.binlog.filereader import (
    END_OF_FILE,
    NEED_DATA,
    BinlogFileReader,
    split_binlog,
)
from protocol.binlog.header import crc32_of, parse_header, verify_crc32
from protocol.binlog.model import EventHeader, RowsEvent, TableMapEvent
from protocol.binlog.stream import EventStream
from protocol.errors import (
    ChecksumMismatch,
    EventDecodeError,
    MalformedPacket,
    ProtocolError,
    TruncatedData,
    UnknownEventType,
    UnknownTable,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "binlogs"
FLAVORS = ("mariadb-10.11", "mariadb-11.8", "mysql-9.7")
FUZZ_ITERATIONS = int(os.environ.get("BINLAKE_FUZZ_ITERATIONS", "300"))


def hexbytes(text: str) -> bytes:
    return bytes.fromhex(" ".join(text.split()))


# --- stand-ins for the row decoder (its own tests live with it) --------------------------------


def stub_table_map(header: EventHeader, body: memoryview, post_header_len: int, *,
                   mariadb: bool = False) -> TableMapEvent:
    if len(body) < 8:
        raise TruncatedData("table map too short")
    return TableMapEvent(header, int.from_bytes(body[:6], "little"), 0, "", "", ())


def stub_rows(header: EventHeader, body: memoryview, post_header_len: int, table_maps, *,
              version: int, kind, partial: bool = False, decoders=None) -> RowsEvent:
    if len(body) < 8:
        raise TruncatedData("rows event too short")
    table_id = int.from_bytes(body[:6], "little")
    if table_id not in table_maps:
        raise UnknownTable("no table map", type_code=header.type_code)
    flags = int.from_bytes(body[6:8], "little")
    return RowsEvent(header, kind, table_maps[table_id], flags, 0, (), (), None, None)


def new_stream(**kwargs) -> EventStream:
    return EventStream(table_map_decoder=stub_table_map, rows_decoder=stub_rows, **kwargs)


def fixture_files(flavor: str) -> list[Path]:
    return sorted(p for p in (FIXTURES / flavor).glob("mysql-bin.0*"))


def decode_files(paths: list[Path], stream: EventStream | None = None):
    stream = stream or new_stream()
    out = []
    for path in paths:
        stream.start_file(path.name)
        for offset, raw in split_binlog(path.read_bytes()):
            for event in stream.feed(raw):
                out.append((offset, raw, event))
    return out


def make_event(type_code: int, body: bytes, *, log_pos: int = 0, flags: int = 0,
               timestamp: int = 1_700_000_000, server_id: int = 1, crc: bool = True) -> bytes:
    size = 19 + len(body) + (4 if crc else 0)
    raw = struct.pack("<IBIIIH", timestamp, type_code, server_id, size, log_pos, flags) + body
    return raw + struct.pack("<I", crc32_of(raw)) if crc else raw


def with_fixed_crc(raw: bytes | bytearray) -> bytes:
    raw = bytearray(raw)
    struct.pack_into("<I", raw, 9, len(raw))
    struct.pack_into("<I", raw, len(raw) - 4, crc32_of(raw[:-4]))
    return bytes(raw)


# --- header and CRC ------------------------------------------------------------------------------

SEED_XID = hexbytes("""ee b7 15 5a 10 01 00 00 00 1f 00 00 00 f2 0b 00
                       00 00 00 66 00 00 00 00 00 00 00 09 30 45 a8""")


def test_header_fields_from_the_spec_example():
    header = parse_header(SEED_XID)
    assert (header.timestamp, header.type_code, header.server_id, header.event_size,
            header.log_pos, header.flags) == (1511372782, 16, 1, 31, 3058, 0)


@pytest.mark.parametrize("cut", range(19))
def test_header_truncated_is_typed(cut):
    with pytest.raises(TruncatedData):
        parse_header(SEED_XID[:cut])


def test_crc32_of_the_spec_example_verifies():
    verify_crc32(SEED_XID, file="f", position=3027)
    assert crc32_of(SEED_XID[:-4]) == 0xA8453009


def test_crc_mismatch_names_file_and_position():
    bad = bytearray(SEED_XID)
    bad[20] ^= 0x01
    with pytest.raises(ChecksumMismatch) as info:
        verify_crc32(bad, file="mysql-bin.000034", position=3027)
    assert (info.value.file, info.value.position) == ("mysql-bin.000034", 3027)
    assert "mysql-bin.000034" in str(info.value) and "3027" in str(info.value)


def test_stream_reports_crc_mismatch_with_the_event_position():
    path = fixture_files("mariadb-10.11")[0]
    data = bytearray(path.read_bytes())
    stream = new_stream(file=path.name)
    offsets = split_binlog(bytes(data))
    target_offset, target = offsets[5]
    data[target_offset + 25] ^= 0x40
    with pytest.raises(ChecksumMismatch) as info:
        for _offset, raw in split_binlog(bytes(data)):
            stream.feed(raw)
    assert info.value.file == path.name
    assert info.value.position == target_offset


def test_verification_can_be_disabled_but_crc_is_still_stripped():
    bad = bytearray(SEED_XID)
    bad[-1] ^= 0xFF
    stream = EventStream(verify_checksums=False, checksum=True)
    (event,) = stream.feed(bytes(bad))
    assert isinstance(event, events.XidEvent) and event.xid == 102


# --- events from the spec ----------------------------------------------------------------------


def feed_one(raw: bytes, **kwargs):
    stream = new_stream(**kwargs)
    return stream.feed(raw)[-1]


def test_seed_xid_event():
    event = feed_one(SEED_XID, checksum=True)
    assert isinstance(event, events.XidEvent)
    assert event.xid == 102
    assert (event.header.position, event.header.next_position) == (3027, 3058)


def test_seed_gtid_list_event():
    raw = hexbytes("""a4 85 9e 59 a3 8c 27 00 00 2b 00 00 00 24 01 00 00 00 00 01 00 00 00 00
                      00 00 00 8c 27 00 00 00 0e 00 00 00 00 00 00 a8 f0 d8 b6""")
    event = feed_one(raw)
    assert isinstance(event, events.GtidListEvent)
    assert event.gtids == ((0, 10124, 3584),)


def test_seed_gtid_event_ddl():
    raw = hexbytes("""eb cc 26 5a a2 8c 27 00 00 2a 00 00 00 17 02 00 00 08 00 9b 26 00 00 00
                      00 00 00 00 00 00 00 29 00 00 00 00 00 00 8e 66 9a 30""")
    event = feed_one(raw)
    assert isinstance(event, events.MariadbGtidEvent)
    assert (event.seq_no, event.domain_id, event.server_id) == (9883, 0, 10124)
    assert event.standalone and event.is_ddl and not event.is_xa
    assert str(event) == "0-10124-9883"


def test_seed_query_event_with_status_vars():
    raw = hexbytes("""71 17 28 5a 02 8c 27 00 00 55 00 00 00 01 09 00 00 00 00 66 01 00 00 00
                      00 00 00 00 00 00 1a 00 00 00 00 00 00 01 00 00 00 50 00 00 00 00 06 03
                      73 74 64 04 08 00 08 00 08 00 00 54 52 55 4e 43 41 54 45 20 54 41 42 4c
                      45 20 74 65 73 74 2e 74 34 4a 69 9e ed""")
    event = feed_one(raw)
    assert isinstance(event, events.QueryEvent)
    assert (event.thread_id, event.schema, event.query) == (358, "", "TRUNCATE TABLE test.t4")
    assert event.status.catalog == "std"
    assert (event.status.charset_client, event.status.collation_connection) == (8, 8)
    assert (event.status.flags2, event.status.sql_mode) == (0, 0x50000000)


def test_seed_stop_start_encryption_annotate_rotate():
    stop = hexbytes("3a b8 15 5a 03 01 00 00 00 17 00 00 00 09 0c 00 00 00 00 4e 99 ee 2c")
    assert isinstance(feed_one(stop), events.StopEvent)
    enc = hexbytes("""b8 5f 5a 59 a4 5d 00 00 00 28 00 00 00 21 01 00 00 00 00 01 01 00 00 00
                      65 57 50 26 63 59 37 46 2f 3b 33 23 06 bb da 62""")
    event = feed_one(enc)
    assert isinstance(event, events.StartEncryptionEvent)
    assert (event.scheme, event.key_version, event.nonce) == (1, 1, b"eWP&cY7F/;3#")
    annotate = hexbytes("""ee b7 15 5a a0 01 00 00 00 36 00 00 00 80 0b 00 00 00 00 69 6e 73 65
                           72 74 20 69 6e 74 6f 20 74 65 73 74 2e 74 34 20 76 61 6c 75 65 73 28
                           31 30 30 29 6d 4c 42 33""")
    event = feed_one(annotate)
    assert isinstance(event, events.AnnotateRowsEvent)
    assert event.query == "insert into test.t4 values(100)"


def test_fake_rotate_sets_file_and_heartbeat_does_not_move():
    # The spec's dump example: fake ROTATE (CRC32), then a heartbeat without a CRC.
    rotate = hexbytes("""00 00 00 00 04 d9 27 00 00 2f 00 00 00 00 00 00 00 20 00 04 00 00 00
                         00 00 00 00 6d 79 73 71 6c 2d 62 69 6e 2e 30 30 30 30 33 34 d5 3f ea d7""")
    stream = new_stream()  # checksum unknown before the FDE: detected by matching
    (event,) = stream.feed(rotate)
    assert isinstance(event, events.RotateEvent) and event.is_fake
    assert event.next_file == "mysql-bin.000034"
    assert (event.header.file, event.header.position) == ("mysql-bin.000034", 4)
    assert stream.position.file == "mysql-bin.000034" and stream.position.pos == 4
    heartbeat = make_event(27, b"mysql-bin.000034", log_pos=1354, flags=0x20, timestamp=0,
                           crc=False)
    (beat,) = EventStream(file="mysql-bin.000034", position=700, checksum=False).feed(heartbeat)
    assert isinstance(beat, events.HeartbeatEvent)
    assert (beat.file, beat.position) == ("mysql-bin.000034", 1354)
    assert beat.header.position == beat.header.next_position == 700


# --- crafted events ------------------------------------------------------------------------------


def query_body(query: bytes, status: bytes, schema: bytes = b"db") -> bytes:
    return (struct.pack("<IIBHH", 7, 0, len(schema), 0, len(status)) + status + schema + b"\0"
            + query)


def test_every_status_variable_is_parsed():
    status = (b"\x00" + struct.pack("<I", 0x4000)
              + b"\x01" + struct.pack("<Q", 0x1234)
              + b"\x03" + struct.pack("<HH", 2, 1)
              + b"\x04" + struct.pack("<HHH", 45, 46, 47)
              + b"\x05\x06+01:00"
              + b"\x06\x03std"
              + b"\x07" + struct.pack("<H", 3)
              + b"\x08" + struct.pack("<H", 8)
              + b"\x09" + struct.pack("<Q", 5)
              + b"\x0a" + struct.pack("<I", 99)
              + b"\x0b\x04root\x09localhost"
              + b"\x0c\x02db1\0db2\0"
              + b"\x0d" + (123456).to_bytes(3, "little")
              + b"\x10\x01" + b"\x11" + struct.pack("<Q", 77) + b"\x12" + struct.pack("<H", 255)
              + b"\x13\x01" + b"\x14\x00"
              + b"\x80" + (654321).to_bytes(3, "little")
              + b"\x81" + struct.pack("<Q", 42)
              + b"\x82\x04" + struct.pack("<Q", 9)
              + b"\x83\x01" + struct.pack("<HH", 33, 192))
    event = feed_one(make_event(2, query_body(b"COMMIT", status)))
    st = event.status
    assert (st.flags2, st.sql_mode, st.auto_increment_increment, st.auto_increment_offset) == (
        0x4000, 0x1234, 2, 1)
    assert (st.charset_client, st.collation_connection, st.collation_server) == (45, 46, 47)
    assert (st.time_zone, st.catalog, st.lc_time_names, st.charset_database) == (
        "+01:00", "std", 3, 8)
    assert (st.table_map_for_update, st.master_data_written) == (5, 99)
    assert (st.invoker_user, st.invoker_host, st.updated_db_names) == (
        "root", "localhost", ("db1", "db2"))
    assert (st.microseconds, st.explicit_defaults_for_timestamp, st.ddl_logged_with_xid) == (
        123456, 1, 77)
    assert (st.default_collation_for_utf8mb4, st.sql_require_primary_key,
            st.default_table_encryption) == (255, 1, 0)
    assert (st.hrnow, st.xid, st.gtid_flags3, st.sa_seq_no) == (654321, 42, 4, 9)
    assert st.character_set_collations == ((33, 192),)
    assert st.unparsed == b"" and st.microsecond == 654321
    assert (event.schema, event.query) == ("db", "COMMIT")


def test_unknown_status_variable_stops_parsing_and_is_kept():
    status = b"\x07" + struct.pack("<H", 3) + b"\xf0\x01\x02"
    event = feed_one(make_event(2, query_body(b"BEGIN", status)))
    assert event.status.lc_time_names == 3
    assert event.status.unparsed == b"\xf0\x01\x02"


@pytest.mark.parametrize("status", [
    b"\x01\x00\x00",  # Q_SQL_MODE needs 8 bytes, the block has 2
    b"\x05\x09abc",  # time zone longer than the block
    b"\x82\x04\x00",  # GTID_FLAGS3 with COMMIT_ALTER needs sa_seq_no
])
def test_status_variables_are_bounded_by_their_length(status):
    with pytest.raises(EventDecodeError) as info:
        feed_one(make_event(2, query_body(b"SELECT 1", status), log_pos=500))
    assert info.value.type_code == 2


def test_status_length_beyond_the_event_is_an_error():
    body = struct.pack("<IIBHH", 1, 0, 0, 0, 200) + b"\0COMMIT"
    with pytest.raises(EventDecodeError):
        feed_one(make_event(2, body))


def test_mariadb_gtid_flags_extra_variants():
    base = struct.pack("<QIB", 5, 3, 0x0C) + b"\0" * 6
    plain = feed_one(make_event(162, base))
    assert (plain.seq_no, plain.domain_id, plain.flags_extra, plain.thread_id) == (5, 3, 0, None)
    alter = struct.pack("<QIB", 6, 0, 0x29) + b"\0" * 6 + b"\x05\x01" + struct.pack("<Q", 4)
    event = feed_one(make_event(162, alter))
    assert (event.flags_extra, event.extra_engines, event.sa_seq_no) == (0x05, 1, 4)
    commit_id = struct.pack("<QIBQ", 7, 0, 0x0E, 123) + b"\x11\x02" + struct.pack("<I", 77)
    event = feed_one(make_event(162, commit_id))
    assert (event.commit_id, event.extra_engines, event.thread_id) == (123, 2, 77)


def test_mysql_heartbeat_v2_and_incident_and_user_var():
    body = b"\x01\x10mysql-bin.000007\x02\x03\xfc\x10\x27\x00"
    beat = feed_one(make_event(41, body, flags=0x20, timestamp=0))
    assert (beat.file, beat.position) == ("mysql-bin.000007", 10000)
    incident = feed_one(make_event(26, struct.pack("<HB", 1, 4) + b"lost"))
    assert (incident.incident, incident.message) == (1, "lost")
    uv = struct.pack("<I", 1) + b"a" + b"\0" + struct.pack("<BII", 2, 63, 8) + struct.pack(
        "<q", -5) + b"\0"
    event = feed_one(make_event(14, uv))
    assert (event.name, event.value) == ("a", -5)
    null = feed_one(make_event(14, struct.pack("<I", 1) + b"b\x01"))
    assert null.is_null and null.value is None


def test_load_data_file_blocks():
    first = feed_one(make_event(17, struct.pack("<I", 7) + b"a,b\n"))
    more = feed_one(make_event(9, struct.pack("<I", 7) + b"c,d\n"))
    assert type(first) is events.BeginLoadQueryEvent and type(more) is events.AppendBlockEvent
    assert [(e.file_id, e.data) for e in (first, more)] == [(7, b"a,b\n"), (7, b"c,d\n")]
    with pytest.raises(EventDecodeError):
        feed_one(make_event(9, b"\x07\x00"))


def test_unknown_event_type_needs_the_ignorable_flag():
    ignorable = feed_one(make_event(99, b"xyz", flags=0x80))
    assert isinstance(ignorable, events.IgnorableEvent) and ignorable.body == b"xyz"
    with pytest.raises(UnknownEventType) as info:
        new_stream(file="mysql-bin.000009").feed(make_event(99, b"xyz", log_pos=1000))
    assert (info.value.type_code, info.value.file, info.value.position) == (
        99, "mysql-bin.000009", 974)
    assert "99" in str(info.value) and "mysql-bin.000009" in str(info.value)


def test_event_size_must_match_the_bytes():
    raw = bytearray(SEED_XID)
    struct.pack_into("<I", raw, 9, 40)
    with pytest.raises(EventDecodeError):
        new_stream().feed(bytes(raw))


# --- compression ---------------------------------------------------------------------------------


def mariadb_block(data: bytes, lenlen: int = 2) -> bytes:
    return bytes([0x80 | lenlen]) + len(data).to_bytes(lenlen, "big") + zlib.compress(data)


def test_compressed_block_round_trip_and_errors():
    assert compression.decompress_block(mariadb_block(b"hello" * 30)) == b"hello" * 30
    with pytest.raises(MalformedPacket):
        compression.decompress_block(b"\x02\x00\x05" + zlib.compress(b"hello"))  # no 0x80
    with pytest.raises(MalformedPacket):
        compression.decompress_block(b"\x92\x00\x05" + zlib.compress(b"hello"))  # not zlib
    with pytest.raises(MalformedPacket):
        compression.decompress_block(b"\x82\x00\x09" + zlib.compress(b"hello"))  # wrong length
    with pytest.raises(MalformedPacket):
        compression.decompress_block(b"\x82\x00\x05" + b"garbage")
    with pytest.raises(MalformedPacket):
        compression.decompress_block(b"\x84\xff\xff\xff\xff", max_size=1000)


def test_query_compressed_event():
    body = query_body(mariadb_block(b"CREATE TABLE t (a INT)", 1), b"")
    event = feed_one(make_event(165, body))
    assert event.compressed and event.query == "CREATE TABLE t (a INT)"


def test_compressed_events_honour_max_decompressed_size():
    """A stream's max_decompressed_size bounds QUERY_COMPRESSED's text and compressed rows."""
    text = b"INSERT INTO t VALUES " + b"(1)," * 60 + b"(1)"  # 262 bytes
    raw = make_event(165, query_body(mariadb_block(text), b""))
    assert feed_one(raw, max_decompressed_size=len(text)).query == text.decode()
    with pytest.raises(EventDecodeError, match=f"claims {len(text)} bytes, more than 100") as info:
        feed_one(raw, max_decompressed_size=100)
    assert info.value.type_code == 165
    prefix = (18).to_bytes(6, "little") + b"\x01\x00" + b"\x02" + b"\xff" + b"\xff"
    with pytest.raises(MalformedPacket, match="claims 300 bytes, more than 299"):
        compression.decompress_rows_event(167, prefix + mariadb_block(b"\x00" * 300), 8, 299)


def test_compressed_rows_rebuild_the_plain_body():
    plain_rest = b"\x00" + b"\x01\x00\x00\x00"
    prefix = (18).to_bytes(6, "little") + b"\x01\x00" + b"\x02" + b"\xff" + b"\xff"
    plain_type, plain = compression.decompress_rows_event(167, prefix + mariadb_block(plain_rest),
                                                          8)
    assert plain_type == 24 and plain == prefix + plain_rest
    v2_prefix = (18).to_bytes(6, "little") + b"\x01\x00" + b"\x04\x00\xaa\xbb" + b"\x01\x01"
    plain_type, plain = compression.decompress_rows_event(169,
                                                          v2_prefix + mariadb_block(b"\x00\x07"),
                                                          10)
    assert plain_type == 30 and plain == v2_prefix + b"\x00\x07"


def payload_event(inner: list[bytes], *, compress: bool = True) -> bytes:
    data = b"".join(inner)
    payload = zstandard.ZstdCompressor().compress(data) if compress else data

    def field(kind: int, value: int) -> bytes:
        encoded = _lenenc(value)
        return bytes([kind, len(encoded)]) + encoded

    fields = (field(2, 0 if compress else 255) + field(3, len(data)) + field(1, len(payload))
              + b"\x00")
    return make_event(40, fields + payload, log_pos=4000)


def _lenenc(value: int) -> bytes:
    return bytes([value]) if value < 251 else b"\xfc" + struct.pack("<H", value)


def test_uncompressed_transaction_payload():
    xid = make_event(16, struct.pack("<Q", 56), crc=False)
    out = new_stream(checksum=True).feed(payload_event([xid], compress=False))
    assert out[-1].xid == 56


def test_transaction_payload_unwraps_inner_events_without_crc():
    begin = make_event(2, query_body(b"BEGIN", b""), crc=False)
    xid = make_event(16, struct.pack("<Q", 55), crc=False)
    raw = payload_event([begin, xid])
    out = new_stream(file="binlog.000001", checksum=True).feed(raw)
    assert [type(e).__name__ for e in out] == ["TransactionPayloadEvent", "QueryEvent", "XidEvent"]
    assert out[2].xid == 55
    assert {(e.header.position, e.header.next_position) for e in out} == {
        (4000 - len(raw), 4000)}


def test_transaction_payload_errors_are_typed():
    begin = make_event(2, query_body(b"BEGIN", b""), crc=False)
    raw = bytearray(payload_event([begin]))
    raw[-10] ^= 0xFF  # inside the zstd frame
    with pytest.raises(ProtocolError):
        new_stream(verify_checksums=False, checksum=True).feed(bytes(raw))
    inner_cut = payload_event([begin[:-3]])
    with pytest.raises(EventDecodeError):
        new_stream(checksum=True).feed(inner_cut)


# --- real binlog files ---------------------------------------------------------------------------

EXPECTED_TYPES = {
    "mariadb-10.11": {2, 4, 5, 13, 14, 15, 16, 17, 18, 19, 23, 24, 25, 38, 160, 161, 162, 163,
                      165, 166, 167, 168},
    "mariadb-11.8": {2, 4, 15, 16, 19, 23, 24, 25, 38, 160, 161, 162, 163},
    "mysql-9.7": {2, 4, 15, 16, 19, 30, 31, 32, 33, 35, 38, 40, 42},
}


@pytest.mark.parametrize("flavor", FLAVORS)
def test_fixture_files_decode_with_exact_positions(flavor):
    decoded = decode_files(fixture_files(flavor))
    seen = set()
    for offset, raw, event in decoded:
        seen.add(event.header.type_code)
        assert not isinstance(event, events.IgnorableEvent)
        # inner events of a TRANSACTION_PAYLOAD share the payload's position
        assert event.header.position == offset
        assert event.header.next_position == offset + len(raw)
    assert EXPECTED_TYPES[flavor] <= seen


@pytest.mark.parametrize("flavor", FLAVORS)
def test_rotate_moves_to_the_next_file(flavor):
    stream = new_stream()
    decode_files(fixture_files(flavor)[:1], stream)
    assert stream.position.file == fixture_files(flavor)[1].name
    assert stream.position.pos == 4


def test_mariadb_11_8_zero_log_pos_inside_transactions_is_tracked():
    path = fixture_files("mariadb-11.8")[0]
    zero = [offset for offset, raw in split_binlog(path.read_bytes())
            if struct.unpack_from("<I", raw, 13)[0] == 0]
    assert len(zero) > 10  # the server really writes them
    for offset, _raw, event in decode_files([path]):
        assert event.header.position == offset


def test_mysql_gtids_carry_commit_timestamps_and_tags():
    decoded = [e for _, _, e in decode_files(fixture_files("mysql-9.7"))]
    gtids = [e for e in decoded if isinstance(e, events.MysqlGtidEvent)]
    assert all(e.immediate_commit_timestamp and e.immediate_commit_timestamp > 1.6e15
               for e in gtids)
    assert all(e.original_commit_timestamp == e.immediate_commit_timestamp for e in gtids)
    tagged = [e for e in gtids if e.tagged]
    assert len(tagged) == 1 and tagged[0].tag == "tagone" and tagged[0].gno == 1
    assert tagged[0].uuid == gtids[0].uuid
    assert [e.gno for e in gtids if not e.tagged] == list(range(1, len(gtids)))
    previous = [e for e in decoded if isinstance(e, events.PreviousGtidsEvent)]
    assert previous[-1].sids == ((gtids[0].uuid, "", ((1, len(gtids) - 1),)),
                                 (gtids[0].uuid, "tagone", ((1, 1),)))
    payloads = [e for e in decoded if isinstance(e, events.TransactionPayloadEvent)]
    assert len(payloads) == 2 and all(p.compression == 0 for p in payloads)


def test_mariadb_xa_and_thread_id():
    decoded = [e for _, _, e in decode_files(fixture_files("mariadb-11.8"))]
    xa = [e for e in decoded if isinstance(e, events.XaPrepareEvent)]
    assert [(e.one_phase, e.xid.gtrid, e.xid.bqual, e.xid.format_id) for e in xa][:2] == [
        (False, b"xa1", b"", 1), (False, b"xa2", b"bq", 7)]
    gtids = [e for e in decoded if isinstance(e, events.MariadbGtidEvent) and e.is_xa]
    assert all(e.thread_id is not None for e in gtids)


# --- the file reader -------------------------------------------------------------------------------


@pytest.mark.parametrize("flavor", FLAVORS)
def test_file_reader_whole_and_byte_by_byte(flavor):
    data = fixture_files(flavor)[0].read_bytes()
    whole = split_binlog(data)
    reader = BinlogFileReader()
    got = []
    for i in range(len(data)):
        reader.receive_data(data[i:i + 1])
        while True:
            offset = reader.offset
            event = reader.next_event()
            if event is NEED_DATA:
                break
            got.append((offset, event))
    reader.receive_data(b"")
    assert reader.next_event() is END_OF_FILE
    assert got == whole


def test_file_reader_rejects_bad_magic_and_truncation():
    with pytest.raises(MalformedPacket):
        split_binlog(b"\xfebim" + SEED_XID)
    with pytest.raises(TruncatedData) as info:
        split_binlog(b"\xfebin" + SEED_XID + SEED_XID[:10])
    assert "35" in str(info.value)  # the offset of the cut event
    with pytest.raises(TruncatedData):
        split_binlog(b"\xfe")
    bad = bytearray(b"\xfebin" + SEED_XID)
    struct.pack_into("<I", bad, 4 + 9, 3)
    with pytest.raises(MalformedPacket):
        split_binlog(bytes(bad))


def test_stream_with_the_network_prologue():
    """As a dump sends it: fake ROTATE, the FDE with log_pos 0, fake GTID_LIST, then events."""
    path = fixture_files("mariadb-10.11")[0]
    raws = split_binlog(path.read_bytes())
    fake_rotate = make_event(4, struct.pack("<Q", 328) + path.name.encode(), flags=0x20,
                             timestamp=0)
    fde = bytearray(raws[0][1])
    struct.pack_into("<I", fde, 13, 0)
    fde = with_fixed_crc(fde)
    fake_list = make_event(163, struct.pack("<I", 0), flags=0x20, timestamp=0)
    stream = new_stream()
    stream.feed(fake_rotate)
    stream.feed(fde)
    stream.feed(fake_list)
    assert stream.position.pos == 328
    for offset, raw in raws[3:]:
        (event,) = stream.feed(raw)[-1:]
        assert event.header.position == offset and event.header.file == path.name


# --- truncation and bit flips: typed errors only ---------------------------------------------------


def all_fixture_events():
    out = []
    for flavor in FLAVORS:
        for path in fixture_files(flavor):
            out.extend((flavor, raw) for _, raw in split_binlog(path.read_bytes()))
    return out


def feed_after_context(flavor: str, raw: bytes, *, verify: bool = True) -> None:
    """Feed an FDE of the flavor first (so the stream knows the checksum), then ``raw``."""
    stream = new_stream(verify_checksums=verify)
    first = fixture_files(flavor)[0]
    stream.feed(split_binlog(first.read_bytes())[0][1])
    stream.feed(raw)


def test_every_truncation_of_every_real_event_is_typed():
    for flavor, raw in all_fixture_events():
        if raw[4] == EventType.FORMAT_DESCRIPTION:
            continue
        for cut in range(19, len(raw) - 4):
            truncated = with_fixed_crc(raw[:cut] + raw[-4:])
            try:
                feed_after_context(flavor, truncated)
            except ProtocolError:
                pass


def test_bit_flips_give_typed_errors_or_decode():
    rng = random.Random(20240229)
    corpus = all_fixture_events()
    for _ in range(FUZZ_ITERATIONS):
        flavor, raw = rng.choice(corpus)
        mutated = bytearray(raw)
        for _ in range(rng.randint(1, 4)):
            mutated[rng.randrange(19 if rng.random() < 0.9 else 0, len(mutated))] ^= (
                1 << rng.randrange(8))
        for candidate, verify in ((bytes(mutated), True),
                                  (with_fixed_crc(mutated) if len(mutated) >= 23 else
                                   bytes(mutated), False)):
            try:
                feed_after_context(flavor, candidate, verify=verify)
            except ProtocolError:
                pass
