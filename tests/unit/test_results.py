"""OK / ERR / EOF packets, column definitions, text rows and whole query responses."""

from __future__ import annotations

import random
from unittest import mock

import pytest

from protocol.binlog import native
from protocol.capabilities import Capability, ServerStatus
from protocol.errors import AccessDenied, MalformedPacket, ProtocolError, ServerError
from protocol.packets import lenenc_bytes, lenenc_int
from protocol.results import (
    ColumnDefinition,
    EofPacket,
    OkPacket,
    TextResultReader,
    com_ping,
    com_query,
    com_quit,
    is_eof,
    parse_column_definition,
    parse_eof,
    parse_err,
    parse_ok,
    parse_text_row,
)

TRACK = int(Capability.SESSION_TRACK)
DEPRECATE = int(Capability.DEPRECATE_EOF)


def _all_truncations_fail(parse, payload: bytes) -> None:  # type: ignore[no-untyped-def]
    for cut in range(len(payload)):
        with pytest.raises(ProtocolError):
            parse(payload[:cut])


def test_ok_minimal() -> None:
    payload = b"\x00\x01\x02\x02\x00\x03\x00"
    assert parse_ok(payload, 0) == OkPacket(1, 2, 2, 3, b"", ())
    assert parse_ok(memoryview(payload), TRACK) == OkPacket(1, 2, 2, 3, b"", ())
    _all_truncations_fail(lambda p: parse_ok(p, 0), payload)


def test_ok_info_without_session_track_is_rest_of_packet() -> None:
    payload = b"\x00\x00\x00\x02\x00\x00\x00Rows matched: 1"
    assert parse_ok(payload, 0).info == b"Rows matched: 1"


def test_ok_with_session_state_mariadb_vector() -> None:
    # The "connection ending OK_Packet" of the spec (autocommit, time_zone, character_set_client)
    state = (b"\x00" + lenenc_bytes(lenenc_bytes(b"autocommit") + lenenc_bytes(b"ON"))
             + b"\x00" + lenenc_bytes(lenenc_bytes(b"time_zone") + lenenc_bytes(b"SYSTEM")))
    status = int(ServerStatus.AUTOCOMMIT | ServerStatus.SESSION_STATE_CHANGED)
    payload = b"\x00\x00\x00" + status.to_bytes(2, "little") + b"\x00\x00" + b"\x00" \
        + lenenc_bytes(state)
    ok = parse_ok(payload, TRACK)
    assert ok.status == status and ok.info == b""
    assert [kind for kind, _ in ok.session_state] == [0, 0]
    assert ok.session_state[0][1] == b"\x0aautocommit\x02ON"
    for cut in range(9, len(payload)):  # shorter cuts are valid OKs without the optional parts
        with pytest.raises(ProtocolError):
            parse_ok(payload[:cut], TRACK)


def test_ok_zero_config_fingerprint_info() -> None:
    info = b"\x01" + b"A" * 64
    payload = b"\x00\x00\x00\x02\x00\x00\x00" + lenenc_bytes(info)
    assert parse_ok(payload, TRACK).info == info


def test_eof() -> None:
    payload = b"\xfe\x01\x00\x22\x00"
    assert parse_eof(payload) == EofPacket(1, 0x22)
    assert is_eof(payload) and is_eof(payload, DEPRECATE)
    assert not is_eof(b"\xfe" + b"\x00" * 9)  # a row whose first field is huge
    _all_truncations_fail(parse_eof, payload)


def test_err_with_sqlstate_and_access_denied() -> None:
    payload = b"\xff\x15\x04#28000Access denied for user 'x'@'y' (using password: YES)"
    exc = parse_err(payload)
    assert type(exc) is AccessDenied
    assert (exc.code, exc.sqlstate) == (1045, "28000")
    assert exc.message.startswith("Access denied")
    other = parse_err(b"\xff\x7a\x04#42S02Table 't' doesn't exist")
    assert type(other) is ServerError and other.code == 1146
    bare = parse_err(b"\xff\x10\x04Too many connections")
    assert (bare.code, bare.sqlstate, bare.message) == (1040, "", "Too many connections")
    with pytest.raises(MalformedPacket):
        parse_err(b"\xff\xff\xff\x01\x02\x00\x00\x00")  # progress report
    for cut in range(3):
        with pytest.raises(MalformedPacket):
            parse_err(payload[:cut])


def _column(name: str, charset: int = 33, col_type: int = 253, ext: bytes | None = None) -> bytes:
    parts = [lenenc_bytes(b"def"), lenenc_bytes(b"db"), lenenc_bytes(b"t"), lenenc_bytes(b"t0"),
             lenenc_bytes(name.encode()), lenenc_bytes(name.encode())]
    if ext is not None:
        parts.append(lenenc_bytes(ext))
    parts.append(b"\x0c" + charset.to_bytes(2, "little") + (80).to_bytes(4, "little")
                 + bytes((col_type,)) + b"\x01\x00" + b"\x00" + b"\x00\x00")
    return b"".join(parts)


def test_column_definition() -> None:
    payload = _column("id", 63, 3)
    assert parse_column_definition(payload, 0) == ColumnDefinition(
        "db", "t", "t0", "id", "id", 63, 80, 3, 1, 0)
    ext = _column("j", ext=b"\x00\x04json")
    assert parse_column_definition(ext, int(Capability.MARIADB_EXTENDED_METADATA)).name == "j"
    _all_truncations_fail(lambda p: parse_column_definition(p, 0), payload)


def test_text_row() -> None:
    payload = lenenc_bytes(b"1") + b"\xfb" + lenenc_bytes("é".encode()) + lenenc_bytes(b"\x00\xff")
    assert parse_text_row(payload, (False, False, False, True)) == ("1", None, "é", b"\x00\xff")
    with pytest.raises(MalformedPacket):
        parse_text_row(payload + b"x", (False, False, False, True))
    _all_truncations_fail(lambda p: parse_text_row(p, (False,) * 4), payload)


def _response(capabilities: int, rows: list[bytes], more: bool = False) -> list[bytes]:
    status = (ServerStatus.AUTOCOMMIT | (ServerStatus.MORE_RESULTS_EXISTS if more else 0))
    packets = [lenenc_int(2), _column("a"), _column("b", 63, 252)]
    if not capabilities & DEPRECATE:
        packets.append(b"\xfe\x00\x00\x02\x00")
    packets += rows
    if capabilities & DEPRECATE:
        packets.append(b"\xfe\x00\x00" + int(status).to_bytes(2, "little") + b"\x00\x00")
    else:
        packets.append(b"\xfe\x00\x00" + int(status).to_bytes(2, "little"))
    return packets


@pytest.mark.parametrize("capabilities", [0, DEPRECATE, DEPRECATE | TRACK])
def test_text_result_set(capabilities: int) -> None:
    long_value = b"x" * (1 << 24)  # a row starting with 0xFE (8-byte length), not a terminator
    rows = [lenenc_bytes(b"1") + lenenc_bytes(b"\x01"), b"\xfb\xfb",
            lenenc_bytes(long_value) + b"\xfb"]
    reader = TextResultReader(capabilities)
    for packet in _response(capabilities, rows):
        assert not reader.done
        reader.feed(packet)
    assert reader.done and reader.result is not None
    assert reader.result.column_names == ["a", "b"]
    assert reader.result.rows == [("1", b"\x01"), (None, None), ("x" * (1 << 24), None)]
    assert reader.result.status == ServerStatus.AUTOCOMMIT
    with pytest.raises(MalformedPacket):
        reader.feed(b"\x00\x00\x00\x02\x00\x00\x00")


def test_ok_response_and_error_response() -> None:
    reader = TextResultReader(DEPRECATE)
    reader.feed(b"\x00\x03\x00\x02\x00\x00\x00")
    assert reader.done and reader.result is not None and reader.result.ok is not None
    assert reader.result.ok.affected_rows == 3
    reader = TextResultReader(DEPRECATE)
    reader.feed(lenenc_int(1))
    reader.feed(_column("a"))
    with pytest.raises(ServerError):
        reader.feed(b"\xff\x28\x05#HY000Query execution was interrupted")
    assert reader.done


def test_multiple_results_are_consumed() -> None:
    reader = TextResultReader(DEPRECATE)
    for packet in _response(DEPRECATE, [b"\x011\x011"], more=True):
        reader.feed(packet)
    assert not reader.done
    reader.feed(b"\x00\x00\x00\x02\x00\x00\x00")
    assert reader.done and reader.result is not None and len(reader.more) == 1


def test_local_infile_is_refused() -> None:
    reader = TextResultReader(DEPRECATE)
    with pytest.raises(MalformedPacket):
        reader.feed(b"\xfb/etc/passwd")


def test_command_builders() -> None:
    assert com_query("SELECT 1") == b"\x03SELECT 1"
    assert com_query(b"DO 1") == b"\x03DO 1"
    assert com_ping() == b"\x0e"
    assert com_quit() == b"\x01"


def test_text_row_lengths_of_every_width() -> None:
    """The inlined fast path (one-byte lengths) and the long forms (0xFC, 0xFD) agree."""
    long2, long3 = "x" * 300, b"\x01" * 70_000
    payload = (b"\x00" + b"\xfb" + b"\xfc" + (300).to_bytes(2, "little") + long2.encode()
               + b"\xfd" + len(long3).to_bytes(3, "little") + long3 + b"\x02ok")
    row = parse_text_row(memoryview(payload), (False, False, False, True, False))
    assert row == ("", None, long2, long3, "ok")
    _all_truncations_fail(lambda p: parse_text_row(p, (False,) * 5), payload)


@pytest.mark.skipif(native.text_row is None, reason="the native extension is not built")
def test_native_text_row_equals_the_python_parser() -> None:
    """The C fast path gives the Python parser's values (types included) for random rows, and
    hands every malformed row back to it (None) so the typed error stays the Python one."""
    assert native.text_row is not None
    rng = random.Random(14)
    for _ in range(2000):
        binary = tuple(rng.random() < 0.4 for _ in range(rng.randint(0, 6)))
        payload = b""
        for _ in binary:
            kind = rng.random()
            if kind < 0.15:
                payload += b"\xfb"
                continue
            raw = rng.randbytes(rng.choice((0, 1, 5, 250, 251, 300, 70_000)))
            payload += lenenc_bytes(raw)
        with mock.patch("protocol.results._native_text_row", None):
            expected = parse_text_row(payload, binary)
        got = native.text_row(payload, binary)
        assert got == expected
        assert got is not None and [type(v) for v in got] == [type(v) for v in expected]
        for bad in (payload + b"x", payload[:-1], payload[: rng.randint(0, len(payload))],
                    payload.replace(b"\xfb", b"\xff", 1)):
            if bad != payload:
                assert native.text_row(bad, binary) is None or (
                    native.text_row(bad, binary) == parse_text_row(bad, binary))
    assert native.text_row(b"\xff", (False,)) is None
    assert native.text_row(b"\xfe\x01", (False,)) is None
