"""Columnar reads (``TextResultReader(kinds=...)``): the native bulk parse of buffered row
packets (``PacketCodec.text_rows``) against the Python path, packet by packet, on random result
sets and on truncated or corrupted ones.

The Python path is the reference: with the extension off, a columnar read holds exactly what
``parse_text_row`` gives each row; with it on, every TEXT_INT/TEXT_FLOAT/TEXT_UTF8 column holds
what ``int``/``float``/strict UTF-8 make of that text (or, counted as a fallback, the text).
Corrupt input must never crash the C code and must end in the Python path's own typed error.
``BINLAKE_NATIVE_FUZZ_ROUNDS`` sizes the fuzz loop (bench/native_asan.sh runs it under ASan).
"""

from __future__ import annotations

import os
import random
from typing import Any
from unittest import mock

import pytest
import trio
import trio.lowlevel

from protocol.binlog import native
from protocol.capabilities import Capability
from protocol.errors import ProtocolError
from protocol.packets import PacketCodec, frame_packet, lenenc_bytes, lenenc_int
from protocol.results import (
    TEXT_BYTES,
    TEXT_DEFAULT,
    TEXT_FLOAT,
    TEXT_INT,
    TEXT_STR,
    TEXT_UTF8,
    ResultSet,
    TextResultReader,
    parse_text_row,
)
from replica.core.connection import Connection, ConnectOptions

DEPRECATE = int(Capability.DEPRECATE_EOF)
ROUNDS = int(os.environ.get("BINLAKE_NATIVE_FUZZ_ROUNDS", "300"))
needs_native = pytest.mark.skipif(native.text_rows is None,
                                  reason="the native extension is not built")


def _column(name: str, charset: int, col_type: int) -> bytes:
    parts = [lenenc_bytes(b"def"), lenenc_bytes(b"db"), lenenc_bytes(b"t"), lenenc_bytes(b"t"),
             lenenc_bytes(name.encode()), lenenc_bytes(name.encode())]
    parts.append(b"\x0c" + charset.to_bytes(2, "little") + (80).to_bytes(4, "little")
                 + bytes((col_type,)) + b"\x01\x00" + b"\x00" + b"\x00\x00")
    return b"".join(parts)


_NUMBERS = ("0", "-0", "7", "-12", "007", "123456789012345678", "-999999999999999999",
            "18446744073709551615", "-170141183460469231731687303715884105728", "1.5",
            "-2.25e-7", "1e308", "1e999", "3.", ".5", "1e", "-", "", "+4", " 5", "1_0",
            "inf", "nan", "0x1F", "١٢", "9" * 70)


def _value(rng: random.Random, kind: int) -> bytes | None:
    if rng.random() < 0.15:
        return None
    pick = rng.random()
    if pick < 0.5:
        return rng.choice(_NUMBERS).encode()
    if pick < 0.7:
        return rng.choice(("é", "naïve", "😀", "a" * 300, "")).encode()
    return rng.randbytes(70_000 if rng.random() < 0.01 else rng.choice((0, 1, 3, 250, 251, 300)))


def _response(rng: random.Random, binary: list[bool], rows: int, seq: int = 1) -> bytes:
    """A whole COM_QUERY response (DEPRECATE_EOF: no column EOF, an OK-as-EOF at the end)."""
    packets = [lenenc_int(len(binary))]
    packets += [_column(f"c{i}", 63 if b else 33, 252 if b else 253)
                for i, b in enumerate(binary)]
    for _ in range(rows):
        packets.append(b"".join(b"\xfb" if (v := _value(rng, 0)) is None else lenenc_bytes(v)
                                for _ in binary))
    packets.append(b"\xfe\x00\x00\x02\x00\x00\x00")
    out = b""
    for payload in packets:
        data, seq = frame_packet(payload, seq)
        out += data
    return out


def _read(wire: bytes, kinds: bytes, pieces: int, rng: random.Random) -> ResultSet:
    """What ``Connection.query_columns`` does, with the wire cut into ``pieces`` receives."""
    codec = PacketCodec()
    codec.reset_sequence(1)
    reader = TextResultReader(DEPRECATE, kinds)
    cuts = sorted(rng.randrange(len(wire) + 1) for _ in range(pieces - 1))
    chunks = [wire[a:b] for a, b in zip([0, *cuts], [*cuts, len(wire)], strict=True)]
    while not reader.pump(codec):
        if not chunks:
            raise ProtocolError("the response ended early")
        codec.receive_data(chunks.pop(0))
    assert reader.result is not None
    return reader.result


def _python(wire: bytes, kinds: bytes) -> ResultSet:
    with mock.patch("protocol.packets._native_text_rows", None), \
            mock.patch("protocol.results._native_text_row", None):
        return _read(wire, kinds, 1, random.Random(0))


def _expected(text: Any, kind: int) -> Any:
    """What a kind makes of the Python path's value (None stays None)."""
    if text is None:
        return None
    raw = text.encode("utf-8", "surrogateescape") if isinstance(text, str) else text
    if kind == TEXT_UTF8:
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return raw
    plain = raw.decode("ascii", "replace")
    if kind == TEXT_INT and plain.lstrip("-").isdigit() and plain.lstrip("-").isascii() and (
            plain.count("-") <= 1 and len(plain) < 64 and not plain.startswith("--")
            and "-" not in plain[1:]):
        return int(plain)
    if kind == TEXT_FLOAT and plain and len(plain) < 64 and set(plain) <= set("0123456789.eE+-"):
        try:
            return float(plain)
        except ValueError:
            pass
    if kind == TEXT_BYTES:
        return raw
    return raw.decode("utf-8", "surrogateescape")  # TEXT_STR, or a number kept as text


@needs_native
def test_bulk_equals_the_python_path_and_applies_the_kinds() -> None:
    rng = random.Random(14)
    for _ in range(ROUNDS):
        binary = [rng.random() < 0.4 for _ in range(rng.randint(1, 6))]
        kinds = bytes(rng.choice((TEXT_STR, TEXT_BYTES, TEXT_INT, TEXT_FLOAT, TEXT_UTF8,
                                  TEXT_DEFAULT)) for _ in binary[:rng.randint(0, len(binary))])
        wire = _response(rng, binary, rng.randint(0, 20))
        reference = _python(wire, kinds)
        plain = _python(wire, b"")
        assert reference.values == plain.values  # the Python path keeps the text
        assert reference.converted == (not reference.values or not reference.values[0] or all(
            k in (TEXT_STR, TEXT_BYTES, TEXT_DEFAULT) for k in kinds))
        got = _read(wire, kinds, rng.randint(1, 8), rng)
        assert got.values is not None and reference.values is not None
        full = [kinds[i] if i < len(kinds) and kinds[i] != TEXT_DEFAULT else
                (TEXT_BYTES if b else TEXT_STR) for i, b in enumerate(binary)]
        want = [[_expected(v, k) for v in column]
                for column, k in zip(reference.values, full, strict=True)]
        assert got.values == tuple(want)
        for column, expected_column in zip(got.values, want, strict=True):
            assert [type(v) for v in column] == [type(v) for v in expected_column]
        fallbacks = sum(1 for column, k in zip(reference.values, full, strict=True)
                        for v in column if v is not None and k in (TEXT_INT, TEXT_FLOAT)
                        and type(_expected(v, k)) is str)
        assert got.converted == (fallbacks == 0)


@needs_native
def test_numbers_are_what_int_and_float_make_of_the_text() -> None:
    codec = PacketCodec()
    rows = [("123456789012345678901234567890", "1.0000000000000002"), ("-5", "-0"),
            ("00042", "2.5e-300"), ("1e3", "1e3")]
    for values in rows:
        data, _ = frame_packet(b"".join(lenenc_bytes(v.encode()) for v in values),
                               codec.sequence)
        codec.receive_data(data)
        codec.sequence = (codec.sequence + 1) & 0xFF
    codec.sequence = 0
    columns: list[list[Any]] = [[], []]
    assert codec.text_rows(bytes((TEXT_INT, TEXT_FLOAT)), columns) == (4, 1)
    assert columns == [[int("123456789012345678901234567890"), -5, 42, "1e3"],
                       [1.0000000000000002, -0.0, 2.5e-300, 1000.0]]
    assert codec.buffered == 0


@needs_native
def test_stops_at_what_is_not_a_plain_row() -> None:
    """EOF/ERR packets, a wrong sequence id, an incomplete packet and a malformed row are left
    in the buffer for next_packet (the Python path raises its typed errors)."""
    row, _ = frame_packet(b"\x011\x012", 0)
    for tail, seq in ((b"\xfe\x00\x00\x02\x00", 1), (b"\xff\x15\x04#28000no", 1),
                      (b"\x011\x012", 5), (b"\x011\x01", 1), (b"\x011\x0522", 1)):
        codec = PacketCodec()
        data, _ = frame_packet(tail, seq)
        codec.receive_data(row + data[:-1] if tail == b"\x011\x01" else row + data)
        columns: list[list[Any]] = [[], []]
        assert codec.text_rows(bytes((TEXT_STR, TEXT_INT)), columns) == (1, 0)
        assert columns == [["1"], [2]]
        assert codec.sequence == 1 and codec.buffered == len(row + data) - len(row) - (
            1 if tail == b"\x011\x01" else 0)
    with pytest.raises(ValueError):
        PacketCodec().text_rows(b"\x00\x00", [[]])


@needs_native
def test_truncated_and_corrupted_responses_fail_as_the_python_path_does() -> None:
    rng = random.Random(1414)
    for _ in range(ROUNDS):
        binary = [rng.random() < 0.4 for _ in range(rng.randint(1, 4))]
        kinds = bytes(rng.choice((TEXT_STR, TEXT_INT, TEXT_FLOAT, TEXT_UTF8)) for _ in binary)
        wire = bytearray(_response(rng, binary, rng.randint(1, 12)))
        if rng.random() < 0.5:
            del wire[rng.randrange(1, len(wire)):]
        for _ in range(rng.randint(1, 4)):
            wire[rng.randrange(len(wire))] = rng.randrange(256)
        outcomes = []
        for native_path in (False, True):
            try:
                result = (_read(bytes(wire), kinds, rng.randint(1, 5), rng) if native_path
                          else _python(bytes(wire), kinds))
                outcomes.append(("ok", len(result.values[0]) if result.values else 0))
            except (ProtocolError, ValueError) as exc:
                outcomes.append((type(exc).__name__, 0))
        assert outcomes[0] == outcomes[1]


def test_without_the_extension_a_columnar_read_is_the_rows_transposed() -> None:
    rng = random.Random(3)
    wire = _response(rng, [False, True, False], 25)
    with mock.patch("protocol.packets._native_text_rows", None):
        columnar = _read(wire, bytes((TEXT_INT, TEXT_UTF8)), 4, rng)
    with mock.patch("protocol.results._native_text_row", None):
        rows = _read(wire, b"", 1, rng)
    plain = TextResultReader(DEPRECATE)
    codec = PacketCodec()
    codec.reset_sequence(1)
    codec.receive_data(wire)
    while not plain.done:
        packet = codec.next_packet()
        assert packet is not None
        plain.feed(packet[1])
    assert plain.result is not None and plain.result.values is None
    assert columnar.values == rows.values == tuple(
        list(column) for column in zip(*plain.result.rows, strict=True))
    assert columnar.converted is False
    assert [parse_text_row(b"\x011", (False,))] == [("1",)]


class _Wire(trio.abc.ReceiveStream):
    """The server's side of a read: ``chunks`` as successive receives."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        await trio.lowlevel.checkpoint()
        return self.chunks.pop(0) if self.chunks else b""

    async def aclose(self) -> None:
        pass


@pytest.mark.parametrize("native_on", [True, False])
def test_a_result_read_in_pieces_is_the_result_cut_in_order(native_on: bool) -> None:
    """``Connection.read_columns_in_pieces`` (a keyless table's one SELECT): pieces of exactly
    ``rows`` rows but the last, in order, together equal to the whole read, whatever the
    receives' sizes — memory holds one piece and one receive, not the result."""
    if native_on and native.text_rows is None:
        pytest.skip("the native extension is not built")
    rng = random.Random(7)
    kinds = bytes((TEXT_INT, TEXT_BYTES, TEXT_UTF8))
    wire = _response(rng, [False, True, False], 1000)
    cuts = sorted(rng.randrange(len(wire) + 1) for _ in range(40))
    chunks = [wire[a:b] for a, b in zip([0, *cuts], [*cuts, len(wire)], strict=True)]
    conn = Connection(_Wire(chunks), ConnectOptions())  # type: ignore[arg-type]
    conn.capabilities = DEPRECATE
    conn._codec.reset_sequence(1)
    pieces: list[tuple[tuple[list[Any], ...], bool]] = []

    async def take(values: tuple[list[Any], ...], converted: bool) -> None:
        pieces.append((values, converted))

    async def main() -> None:
        await conn.read_columns_in_pieces(kinds, 64, take)

    with mock.patch("protocol.packets._native_text_rows",
                    native.text_rows if native_on else None):
        whole = _read(wire, kinds, 1, random.Random(0))
        trio.run(main)
    assert [len(v[0]) for v, _ in pieces] == [64] * 15 + [40]
    assert whole.values is not None
    for column, expected in enumerate(whole.values):
        assert [value for values, _ in pieces for value in values[column]] == expected
    assert {converted for _, converted in pieces} == {whole.converted}
