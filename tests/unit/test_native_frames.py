"""protocol/_native_frames.c against the Python reference it replaces: a dump's packets split
(``PacketCodec.next_payloads_after``) and a batch's plain events framed
(``EventStream.feed_into``) give the same payloads, events, positions, codec and stream state,
and the same typed errors, over the fixture binlogs of every flavour as they are, cut into
random batches, and truncated, bit-flipped, resized or re-flagged (``BINLAKE_NATIVE_FUZZ_ROUNDS``
corrupted batches per flavour; bench/native_asan.sh runs it under the sanitizers)."""

from __future__ import annotations

import os
import random
import struct
import zlib
from typing import Any

import pytest

from protocol import packets
from protocol.binlog import stream as stream_module
from protocol.binlog.model import EventHeader, RowsEvent
from protocol.binlog.stream import EventStream
from protocol.errors import ProtocolError
from protocol.frozen import positional_maker
from protocol.native_frames import feed_plain, split_payloads
from protocol.packets import PacketCodec

from .test_binlog_events import fixture_files, new_stream, split_binlog

pytestmark = pytest.mark.skipif(feed_plain is None or split_payloads is None,
                                reason="protocol._native_frames is not built")

ROUNDS = int(os.environ.get("BINLAKE_NATIVE_FUZZ_ROUNDS", "300"))
FLAVORS = ["mariadb-10.11", "mariadb-11.8", "mysql-9.7"]


def _events(flavor: str) -> list[tuple[str, list[bytes]]]:
    return [(path.name, [raw for _, raw in split_binlog(path.read_bytes())])
            for path in fixture_files(flavor)]


def _shape(event: Any) -> Any:
    """What a decoded event says, comparable across two streams (rows by their values)."""
    if isinstance(event, RowsEvent):
        return (event.header, event.kind, event.table.table_id, event.flags, event.row_count,
                event.before_columns, event.after_columns,
                None if event.before is None else [list(c) for c in event.before],
                None if event.after is None else [list(c) for c in event.after])
    return event


def _feed(make: Any, file: str, batches: list[list[bytes]], native: bool,
          monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Each batch through one stream's feed_into; what came out, the errors (class and
    message) and the position after each batch."""
    monkeypatch.setattr(stream_module, "_native_feed_plain", feed_plain if native else None)
    stream: EventStream = make()
    stream.start_file(file)
    trace: list[Any] = []
    for batch in batches:
        out: list[Any] = []
        try:
            stream.feed_into(batch, out)
            error = None
        except ProtocolError as exc:  # MalformedPacket and ChecksumMismatch
            error = (type(exc).__name__, str(exc))
        trace.append(([_shape(e) for e in out], error, stream.position, stream.file))
    return trace


def _batches(rng: random.Random, events: list[bytes]) -> list[list[bytes]]:
    batches, i = [], 0
    while i < len(events):
        n = rng.choice([1, 2, 5, 40, len(events)])
        batches.append(events[i:i + n])
        i += n
    return batches


def _corrupt(rng: random.Random, raw: bytes) -> bytes:
    event = bytearray(raw)
    roll = rng.randrange(6)
    if roll == 0 and len(event) > 1:  # cut short, size and CRC made consistent or not
        event = event[:rng.randrange(len(event))]
        if len(event) >= 19 and rng.random() < 0.7:
            event[9:13] = (len(event) + 4).to_bytes(4, "little")
            event += zlib.crc32(event).to_bytes(4, "little")
    elif roll == 1 and event:  # a flipped bit, the CRC fixed (or not)
        event[rng.randrange(len(event))] ^= 1 << rng.randrange(8)
        if len(event) > 23 and rng.random() < 0.7:
            event[-4:] = zlib.crc32(event[:-4]).to_bytes(4, "little")
    elif roll == 2 and len(event) >= 19:  # event_size that lies
        event[9:13] = rng.randrange(1 << 32).to_bytes(4, "little")
    elif roll == 3 and len(event) >= 19:  # artificial, or another log_pos
        if rng.random() < 0.5:
            event[17] |= 0x20
        else:
            event[13:17] = rng.choice([0, 1, len(event) - 1, 1 << 31]).to_bytes(4, "little")
        event[-4:] = zlib.crc32(event[:-4]).to_bytes(4, "little")
    elif roll == 4 and len(event) > 23:  # another type, the CRC fixed
        event[4] = rng.choice([16, 19, 23, 30, 33, 162, 166, 4, 15, 27, 40])
        event[-4:] = zlib.crc32(event[:-4]).to_bytes(4, "little")
    else:
        event = bytearray(rng.randbytes(rng.randrange(40)))
    return bytes(event)


@pytest.mark.parametrize("stub", [True, False], ids=["stub-rows", "real-rows"])
@pytest.mark.parametrize("flavor", FLAVORS)
def test_fixture_binlogs_frame_alike(flavor: str, stub: bool,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Every fixture binlog as it is, in random batches: the same events and positions."""
    make = new_stream if stub else (lambda: EventStream(arrow=True))
    rng = random.Random(flavor)
    for file, events in _events(flavor):
        batches = _batches(rng, events)
        expected = _feed(make, file, batches, False, monkeypatch)
        assert _feed(make, file, batches, True, monkeypatch) == expected
        assert sum(len(out) for out, *_ in expected) >= len(events)


@pytest.mark.parametrize("verify", [True, False], ids=["verify", "no-verify"])
@pytest.mark.parametrize("flavor", FLAVORS)
def test_corrupted_batches_raise_the_same_errors(flavor: str, verify: bool,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Truncated, flipped, resized, re-flagged and re-typed events among good ones: the same
    events before each error, the same typed error, the same position after it."""
    files = _events(flavor)
    rng = random.Random(f"{flavor}{verify}")
    for _ in range(ROUNDS):
        file, events = rng.choice(files)
        events = list(events)
        for _ in range(rng.randrange(1, 4)):
            i = rng.randrange(1, len(events))  # the first FDE kept: the plain path needs it
            events[i] = _corrupt(rng, events[i])
        batches = _batches(rng, events)
        make = (lambda: new_stream(verify_checksums=verify)) if rng.random() < 0.5 else (
            lambda: EventStream(arrow=True, verify_checksums=verify))
        assert (_feed(make, file, batches, True, monkeypatch)
                == _feed(make, file, batches, False, monkeypatch))


def _without_checksums(events: list[bytes]) -> list[bytes]:
    """A binlog as a server with binlog_checksum=NONE writes it: its FDE says so (algorithm
    byte 0, the checksum room kept) and no other event has a CRC32 trailer."""
    out: list[bytes] = []
    for raw in events:
        event = bytearray(raw)
        if event[4] == 15:  # FORMAT_DESCRIPTION
            event[-5] = 0
        else:
            del event[-4:]
            event[9:13] = len(event).to_bytes(4, "little")
        out.append(bytes(event))
    return out


@pytest.mark.parametrize("flavor", FLAVORS)
def test_binlogs_without_checksums_frame_alike(flavor: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """binlog_checksum=NONE (the C loop's other body end: no trailer to cut): the fixture
    binlogs decode without an error and alike both ways, and so do corrupted batches."""
    rng = random.Random(f"{flavor}-no-checksum")
    files = [(file, _without_checksums(events)) for file, events in _events(flavor)]

    def make() -> EventStream:
        return EventStream(arrow=True)

    for file, events in files:
        batches = _batches(rng, events)
        expected = _feed(make, file, batches, False, monkeypatch)
        assert _feed(make, file, batches, True, monkeypatch) == expected
        assert [error for _, error, *_ in expected] == [None] * len(batches)
    for _ in range(ROUNDS // 10):
        file, events = rng.choice(files)
        events = list(events)
        i = rng.randrange(1, len(events))  # the first FDE kept
        events[i] = _corrupt(rng, events[i])
        batches = _batches(rng, events)
        assert (_feed(make, file, batches, True, monkeypatch)
                == _feed(make, file, batches, False, monkeypatch))


def test_a_decoder_error_leaves_the_events_before_it_and_the_position() -> None:
    """A decoder's exception comes back with its event's index and the position before it,
    the events before it in ``out``; other exceptions the same way, for the caller to raise."""
    events = [raw for _, raw in split_binlog(fixture_files("mariadb-10.11")[0].read_bytes())]
    plain = [i for i, raw in enumerate(events) if raw[4] in (16, 162)][:3]
    calls: list[int] = []

    def decoder(header: Any, body: bytes) -> Any:
        calls.append(header.type_code)
        if len(calls) == 3:
            raise KeyError("third")
        return header

    table: list[Any] = [None] * 256
    table[16] = table[162] = decoder
    make = positional_maker(EventHeader)
    batch = [events[i] for i in plain]
    out: list[Any] = []
    index, position, error = feed_plain(batch, 0, out, "f", 4, True, True, make, tuple(table),
                                        zlib.crc32, None, None)
    assert (index, type(error), len(out)) == (2, KeyError, 2)
    assert position == out[1].next_position
    assert error.__traceback__ is not None
    with pytest.raises(TypeError):
        feed_plain(batch, 0, out, "f", 4, True, True, make, (None,) * 255, zlib.crc32, None,
                   None)


@pytest.mark.parametrize("seed", range(200))
def test_split_payloads_takes_what_the_python_split_takes(seed: int) -> None:
    """Random framings and random garbage: the C split and the one-pass Python split take
    the same payloads and leave the same start and sequence id."""
    rng = random.Random(seed)
    wire = bytearray(rng.randbytes(rng.randrange(3)))
    seq = rng.randrange(256)
    for _ in range(rng.randrange(30)):
        roll = rng.random()
        body = rng.randbytes(rng.randrange(0, 400))
        status = rng.choice([0, 0, 0, 0xFE, 0xFF])
        payload = b"" if roll < 0.05 else bytes([status]) + body
        length = len(payload) if roll > 0.1 else rng.randrange(1 << 24)
        ident = seq if rng.random() > 0.05 else rng.randrange(256)
        wire += struct.pack("<I", length | ident << 24) + payload
        seq = (ident + 1) & 0xFF
    if rng.random() < 0.3:
        wire = wire[:rng.randrange(len(wire) + 1)]
    start_seq = rng.randrange(256) if rng.random() < 0.2 else (wire[3] if len(wire) > 3 else 0)
    limit = rng.choice([1 << 30, 200, 0xFFFFFF + 5])
    check = rng.random() < 0.8
    results = []
    for native in (True, False):
        codec = PacketCodec(max_packet_size=limit, check_sequence=check)
        codec.sequence = start_seq
        codec.receive_data(bytes(wire))
        taken = []
        if native:
            taken = codec.next_payloads_after(0)
        else:
            taken = codec._payloads_one_pass(0)
        results.append((taken, codec.sequence, codec.buffered))
    assert results[0] == results[1]
    assert packets._native_split_payloads is split_payloads


def test_split_payloads_refuses_offsets_outside_the_buffer() -> None:
    with pytest.raises(ValueError):
        split_payloads(bytearray(10), 5, 11, 0, True, 100, 0)
    with pytest.raises(ValueError):
        split_payloads(bytearray(10), 6, 5, 0, True, 100, 0)
    assert split_payloads(bytearray(b"\x02\x00\x00\x07\x00x"), 0, 6, 7, True, 100, 0) == (
        [b"x"], 6, 8)


@pytest.mark.parametrize("seed", range(100))
def test_end_positions_follow_what_the_session_follows(seed: int) -> None:
    """The C loop of the session's position tracking stops where the Python loop must take
    over (ROTATE, FDE, heartbeats, short or non-bytes events) with the same end position."""
    from protocol.native_frames import end_positions

    rng = random.Random(seed)
    events: list[Any] = []
    for _ in range(rng.randrange(30)):
        if rng.random() < 0.05:
            events.append(rng.randbytes(rng.randrange(19)) if rng.random() < 0.8
                          else bytearray(30))
            continue
        type_code = rng.choice([2, 16, 19, 30, 160, 162, 4, 15, 27, 41])
        log_pos = rng.choice([0, 0, rng.randrange(1 << 32)])
        flags = rng.choice([0, 0x20, 0x08])
        size = rng.randrange(1 << 32)
        events.append(struct.pack("<IBIIIH", 0, type_code, 1, size, log_pos, flags)
                      + rng.randbytes(rng.randrange(5)))
    start = rng.randrange(1 << 40)
    pos, index = start, 0
    while index < len(events):  # the reference: replica.core.session's loop
        data = events[index]
        if type(data) is not bytes or len(data) < 19 or data[4] in (4, 15, 27, 41):
            break
        _, _, _, size, log_pos, flags = struct.unpack_from("<IBIIIH", data)
        if log_pos:
            pos = log_pos
        elif not flags & 0x20:
            pos += size
        index += 1
    assert end_positions(events, 0, start) == (index, pos)
    if index < len(events):
        assert end_positions(events, index + 1, 7)[0] >= index + 1
