"""Packet framing and length-encoded fields: whole, byte by byte, with trailing bytes."""

from __future__ import annotations

import random

import pytest

from protocol import packets
from protocol.errors import MalformedPacket, PacketSequenceError, PacketTooLarge, TruncatedData
from protocol.packets import (
    MAX_CHUNK,
    PacketCodec,
    frame_packet,
    lenenc_bytes,
    lenenc_int,
    read_fixed,
    read_lenenc,
    read_lenenc_bytes,
    read_lenenc_int,
    read_nul_bytes,
)


def _feed_all(codec: PacketCodec, data: bytes, step: int) -> list[tuple[int, bytes]]:
    out = []
    for i in range(0, len(data), step):
        codec.receive_data(data[i:i + step])
        while (packet := codec.next_packet()) is not None:
            out.append(packet)
    return out


def test_com_ping_vector() -> None:
    assert frame_packet(b"\x10", 0) == (b"\x01\x00\x00\x00\x10", 1)


@pytest.mark.parametrize("size", [0, 1, 250, MAX_CHUNK - 1])
def test_single_packet_whole_bytewise_trailing(size: int) -> None:
    payload = bytes(i & 0xFF for i in range(size))
    wire, nxt = frame_packet(payload, 7)
    assert nxt == 8 and len(wire) == size + 4
    # whole
    codec = PacketCodec()
    codec.reset_sequence(7)
    codec.receive_data(wire)
    assert codec.next_packet() == (7, payload)
    assert codec.next_packet() is None and codec.sequence == 8
    # with trailing bytes (the start of the next packet)
    codec = PacketCodec()
    codec.reset_sequence(7)
    codec.receive_data(wire + b"\x05\x00\x00")
    assert codec.next_packet() == (7, payload)
    assert codec.next_packet() is None and codec.buffered == 3
    if size <= 250:  # byte by byte
        codec = PacketCodec()
        codec.reset_sequence(7)
        got = []
        for i in range(len(wire)):
            codec.receive_data(wire[i:i + 1])
            packet = codec.next_packet()
            if i < len(wire) - 1:
                assert packet is None
            else:
                got.append(packet)
        assert got == [(7, payload)]


@pytest.mark.parametrize("size", [MAX_CHUNK, MAX_CHUNK + 1, 2 * MAX_CHUNK, 2 * MAX_CHUNK + 5])
def test_split_packets_round_trip(size: int) -> None:
    payload = (bytes(range(256)) * (size // 256 + 1))[:size]
    wire, nxt = frame_packet(payload, 254)
    chunks = size // MAX_CHUNK + 1  # an exact multiple ends with an empty chunk
    assert len(wire) == size + 4 * chunks
    assert nxt == (254 + chunks) & 0xFF
    if size % MAX_CHUNK == 0:
        assert wire[-4:] == bytes((0, 0, 0, (254 + chunks - 1) & 0xFF))
    for step in (len(wire), 1 << 20, 4093):
        codec = PacketCodec()
        codec.reset_sequence(254)
        assert _feed_all(codec, wire + b"\x01\x00\x00", step) == [(254, payload)]
        assert codec.sequence == nxt and codec.buffered == 3


def test_many_small_packets_in_one_buffer() -> None:
    codec = PacketCodec()
    wire = b"".join(frame_packet(bytes([i]) * i, i)[0] for i in range(300 % 256))
    got = _feed_all(codec, wire, 7)
    assert [p for _, p in got] == [bytes([i]) * i for i in range(300 % 256)]


def test_send_advances_sequence_and_forced_sequence() -> None:
    codec = PacketCodec()
    assert codec.send(b"ab") == b"\x02\x00\x00\x00ab"
    assert codec.sequence == 1
    assert codec.send(b"", sequence=9) == b"\x00\x00\x00\x09"
    assert codec.sequence == 10
    codec.reset_sequence()
    assert codec.sequence == 0


def test_sequence_mismatch_is_typed() -> None:
    codec = PacketCodec()
    codec.receive_data(b"\x01\x00\x00\x05x")
    with pytest.raises(PacketSequenceError) as info:
        codec.next_packet()
    assert (info.value.expected, info.value.got) == (0, 5)


def test_sequence_mismatch_inside_split_packet() -> None:
    wire, _ = frame_packet(b"x" * (MAX_CHUNK + 3), 0)
    bad = bytearray(wire)
    bad[4 + MAX_CHUNK + 3] = 9  # sequence id of the second chunk
    codec = PacketCodec()
    codec.receive_data(bytes(bad))
    with pytest.raises(PacketSequenceError):
        codec.next_packet()


def test_sequence_wraps_at_256() -> None:
    codec = PacketCodec()
    codec.reset_sequence(255)
    codec.receive_data(frame_packet(b"a", 255)[0] + frame_packet(b"b", 0)[0])
    assert codec.next_packet() == (255, b"a")
    assert codec.next_packet() == (0, b"b")


def test_sequence_check_can_be_disabled() -> None:
    codec = PacketCodec(check_sequence=False)
    codec.receive_data(b"\x01\x00\x00\x33z")
    assert codec.next_packet() == (0x33, b"z")


def test_too_large_is_detected_from_the_header() -> None:
    codec = PacketCodec(max_packet_size=10)
    codec.receive_data(b"\x0b\x00\x00\x00")  # announces 11 bytes; none of them sent yet
    with pytest.raises(PacketTooLarge):
        codec.next_packet()
    codec = PacketCodec(max_packet_size=MAX_CHUNK + 10)
    codec.receive_data(b"\xff\xff\xff\x00" + bytes(MAX_CHUNK) + b"\x0b\x00\x00\x01")
    with pytest.raises(PacketTooLarge):
        codec.next_packet()


def test_truncated_stream_just_waits() -> None:
    codec = PacketCodec()
    codec.receive_data(b"\x05\x00\x00\x00abc")
    assert codec.next_packet() is None
    codec.receive_data(b"de")
    assert codec.next_packet() == (0, b"abcde")


LENENC_INTS = [
    (0, b"\x00"), (250, b"\xfa"), (251, b"\xfc\xfb\x00"), (0xFFFF, b"\xfc\xff\xff"),
    (0x10000, b"\xfd\x00\x00\x01"), (0xFFFFFF, b"\xfd\xff\xff\xff"),
    (0x1000000, b"\xfe\x00\x00\x00\x01\x00\x00\x00\x00"), (2**64 - 1, b"\xfe" + b"\xff" * 8),
]


@pytest.mark.parametrize(("value", "wire"), LENENC_INTS)
def test_lenenc_int(value: int, wire: bytes) -> None:
    assert lenenc_int(value) == wire
    assert read_lenenc_int(wire + b"zz", 0) == (value, len(wire))
    assert read_lenenc_int(memoryview(b"q" + wire), 1) == (value, len(wire) + 1)
    for cut in range(len(wire)):
        with pytest.raises(TruncatedData):
            read_lenenc_int(wire[:cut], 0)


def test_lenenc_null_and_invalid() -> None:
    assert read_lenenc_int(b"\xfb", 0) == (None, 1)
    assert read_lenenc_bytes(b"\xfb", 0) == (None, 1)
    with pytest.raises(MalformedPacket):
        read_lenenc_int(b"\xff", 0)
    with pytest.raises(ValueError):
        lenenc_int(-1)


def test_one_lenenc_reader_one_error_family() -> None:
    """packets.read_lenenc is the reader of every layer: a NULL or 0xFF prefix is a
    MalformedPacket, running past the bound a TruncatedData, wherever it is read."""
    from protocol.binlog._cursor import Cursor

    assert read_lenenc(b"\xfc\x01\x02", 0) == (0x0201, 3)
    assert read_lenenc(b"x\x05", 1, 2) == (5, 2)
    with pytest.raises(TruncatedData, match="truncated at offset 0"):
        read_lenenc(b"\xfc\x01\x02", 0, 2)  # the bound, not the buffer, ends it
    for prefix in (b"\xfb", b"\xff"):
        with pytest.raises(MalformedPacket, match="invalid length-encoded integer prefix") as info:
            read_lenenc(prefix, 0)
        assert type(info.value) is MalformedPacket
    with pytest.raises(TruncatedData, match="^column count: length-encoded integer truncated"):
        Cursor(b"\xfd\x01").lenenc("column count")
    with pytest.raises(MalformedPacket, match="^payload size: invalid length-encoded"):
        Cursor(b"\xfb").lenenc("payload size")
    assert Cursor(b"\xfe" + bytes(range(1, 9))).lenenc() == 0x0807060504030201


def test_lenenc_bytes_and_fixed_and_nul() -> None:
    data = lenenc_bytes(b"hello") + b"world\0" + b"xyz"
    value, off = read_lenenc_bytes(data, 0)
    assert value == b"hello"
    value, off = read_nul_bytes(memoryview(data), off)
    assert value == b"world"
    assert read_fixed(data, off, 3) == (b"xyz", len(data))
    with pytest.raises(TruncatedData):
        read_lenenc_bytes(b"\x05abc", 0)
    with pytest.raises(TruncatedData):
        read_nul_bytes(b"abc", 0)
    with pytest.raises(TruncatedData):
        read_fixed(b"ab", 0, 3)
    big = b"x" * 300
    assert read_lenenc_bytes(lenenc_bytes(big), 0) == (big, 303)


def _drain(codec: PacketCodec, batched: bool | str) -> list[bytes | str]:
    """Every packet buffered (next_packets first when ``batched``; when it is ``"after"``,
    next_payloads_after for packets beginning with 0x00 and 0xFE, the byte put back; then
    next_packet for what they leave); an error as its class name, last."""
    out: list[bytes | str] = []
    while True:
        if batched == "after":
            out += (bytes([status]) + payload for status in (0, 0xFE)
                    for payload in codec.next_payloads_after(status))
        elif batched:
            out += codec.next_packets()
        try:
            packet = codec.next_packet()
        except (PacketSequenceError, PacketTooLarge) as exc:
            out.append(type(exc).__name__)
            return out
        if packet is None:
            return out
        out.append(packet[1])


@pytest.mark.parametrize("one_pass_max", [1 << 20, 0, "native"],
                         ids=["one-pass", "scan-first", "native"])
@pytest.mark.parametrize("seed", range(40))
def test_next_packets_takes_what_next_packet_would(seed: int, one_pass_max: int | str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The batched split (also of the payloads after a given first byte) returns the same payloads and errors as
    one-by-one and leaves the same next sequence id and buffered bytes, with split (16 MiB)
    packets, a wrong sequence id or an oversized packet in the stream, and bytes arriving in
    arbitrary pieces; the payloads after a byte all three ways (one pass over a small buffer,
    a scan before the copy, the C split of protocol/_native_frames.c)."""
    if one_pass_max == "native":
        if packets._native_split_payloads is None:
            pytest.skip("protocol._native_frames is not built")
    else:
        monkeypatch.setattr(packets, "_native_split_payloads", None)
        monkeypatch.setattr(packets, "_ONE_PASS_MAX", one_pass_max)

    rng = random.Random(seed)
    seq = rng.randrange(256)
    wire = bytearray()
    for _ in range(rng.randrange(1, 30)):
        roll = rng.random()
        if roll < 0.03:
            payload = bytes(MAX_CHUNK + rng.randrange(3))  # split in two or three chunks
        elif roll < 0.3:
            payload = rng.randbytes(rng.randrange(4096, 9000))
        else:
            payload = rng.randbytes(rng.randrange(0, 300))
            if rng.random() < 0.7:
                payload = b"\x00" + payload  # as a binlog dump's events
        if rng.random() < 0.03:
            seq = (seq + 5) & 0xFF  # a wrong sequence id
        framed, seq = frame_packet(payload, seq)
        wire += framed
    check = rng.random() < 0.8
    limit = rng.choice([1 << 30, 5000])
    results = []
    for batched in (True, "after", False):
        codec = PacketCodec(max_packet_size=limit, check_sequence=check)
        codec.sequence = wire[3]
        steps = random.Random(seed)  # the same pieces for both
        got: list[bytes | str] = []
        i = 0
        while i < len(wire) and not (got and isinstance(got[-1], str)):
            step = steps.choice([1, 7, 300, 5000, 1 << 20, len(wire)])
            codec.receive_data(bytes(wire[i:i + step]))
            i += step
            got += _drain(codec, batched)
        results.append((got, codec.sequence, codec.buffered))
    assert results[0] == results[1] == results[2]
