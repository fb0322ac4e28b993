"""ReplicationSession against a scripted connection: registration order, dump requests, stall
detection, position tracking (rotations, MariaDB 11.4+ zero log_pos) and semi-sync ACKs."""

from __future__ import annotations

import itertools
import struct
import zlib

import pytest
import trio

from protocol import errors
from protocol.binlog.model import BinlogPosition
from protocol.gtid import GtidPosition, GtidSet
from protocol.packets import PacketCodec
from replica.core.session import ReplicationSession, SemiSyncMode, SessionOptions, StartFrom
from replica.errors import HeartbeatTimeout, ReadTimeout

VARIABLES = [("server_id", "1"), ("log_bin", "ON"), ("binlog_format", "ROW"),
             ("binlog_checksum", "CRC32"), ("rpl_semi_sync_master_enabled", "ON")]


def event(type_code: int, body: bytes, log_pos: int, flags: int = 0) -> bytes:
    size = 19 + len(body) + 4
    head = struct.pack("<IBIIIH", 0, type_code, 1, size, log_pos, flags) + body
    return head + struct.pack("<I", zlib.crc32(head))


def rotate(file: str, pos: int, fake: bool = True) -> bytes:
    return event(4, struct.pack("<Q", pos) + file.encode(), 0, 0x20 if fake else 0)


def fde(log_pos: int = 0) -> bytes:
    return event(15, bytes(95) + b"\x01", log_pos)  # checksum algorithm byte: CRC32


class FakeConnection:
    """Answers queries from a table and serves scripted packets; records what was sent."""

    def __init__(self, packets: list[bytes | None], *, mariadb: bool = True,
                 variables: list[tuple[str, str]] = VARIABLES,
                 server_version: str = "10.11.19-MariaDB-log") -> None:
        self.is_mariadb = mariadb
        self.server_version = server_version
        self.packets = list(packets)
        self.variables = variables
        self.statements: list[str] = []
        self.sent: list[tuple[bytes, int | None]] = []
        self._codec = PacketCodec()
        self.closed = False

    async def query(self, sql: str) -> list[tuple[str | None, ...]]:
        self.statements.append(sql)
        if sql.startswith("SELECT UNIX_TIMESTAMP"):
            return [("1700000000",)]
        if sql.startswith("SHOW GLOBAL VARIABLES"):
            return list(self.variables)
        if sql in ("SHOW MASTER STATUS", "SHOW BINARY LOG STATUS"):
            return [("bin.000007", "1234", "", "")]
        if sql == "SHOW BINARY LOGS":
            return [("bin.000002", "999"), ("bin.000007", "1234")]
        raise AssertionError(sql)

    async def execute(self, sql: str) -> None:
        self.statements.append(sql)

    def reset_sequence(self, seq: int = 0) -> None:
        self._codec.reset_sequence(seq)

    @property
    def sequence(self) -> int:
        return int(self._codec.sequence)

    async def send_packet(self, payload: bytes, seq: int | None = None) -> None:
        self.sent.append((payload, seq))
        self._codec.send(payload, seq)

    async def read_packet(self, timeout: float | None = None) -> bytes:
        if self.sent and self.sent[-1][0][:1] == b"\x15" and not getattr(self, "_registered",
                                                                          False):
            self._registered = True
            return b"\x00\x00\x00\x02\x00\x00\x00"
        if not self.packets:
            await trio.sleep(timeout if timeout is not None else 1e9)
            raise ReadTimeout("nothing")
        packet = self.packets.pop(0)
        if packet is None:
            await trio.sleep(timeout if timeout is not None else 1e9)
            raise ReadTimeout("nothing")
        return packet

    async def close(self) -> None:
        self.closed = True

    def buffered_packets(self) -> list[bytes]:
        """The scripted packets up to the next ``None`` (one read's worth), never waiting."""
        out: list[bytes] = []
        while self.packets and self.packets[0] is not None:
            out.append(self.packets.pop(0))
        if self.packets:
            self.packets.pop(0)
        return out

    def buffered_payloads_after(self, status: int) -> list[bytes]:
        out: list[bytes] = []
        while self.packets and self.packets[0] is not None and self.packets[0][:1] == bytes(
                [status]):
            out.append(self.packets.pop(0)[1:])
        if self.packets and self.packets[0] is None:
            self.packets.pop(0)
        return out

    def buffered_packet(self) -> bytes | None:
        return self.packets.pop(0) if self.packets and self.packets[0] is not None else None


EOF = b"\xfe\x00\x00\x02\x00"


def ok(data: bytes, ack: bool | None = None) -> bytes:
    if ack is None:
        return b"\x00" + data
    return b"\x00\xef" + (b"\x01" if ack else b"\x00") + data


async def test_registration_order_and_dump_from_file_position():
    conn = FakeConnection([ok(rotate("bin.000003", 120)), EOF])
    session = await ReplicationSession.start(
        conn, SessionOptions(server_id=77, start=BinlogPosition("bin.000003", 120),
                             heartbeat_period=2.5, report_host="me"))
    assert conn.statements[:2] == ["SELECT UNIX_TIMESTAMP()", conn.statements[1]]
    assert "SET @master_heartbeat_period=2500000000" in conn.statements
    assert "SET @mariadb_slave_capability=4" in conn.statements
    assert not any(s.startswith("SET @rpl_semi_sync") for s in conn.statements)  # not asked for
    register, dump = conn.sent[0][0], conn.sent[1][0]
    assert register[0] == 0x15 and b"me" in register
    assert dump == b"\x12" + struct.pack("<IHI", 120, 0, 77) + b"bin.000003"
    events = [bytes(e.data) async for e in session]
    assert [e[4] for e in events] == [4]
    assert session.position == BinlogPosition("bin.000003", 120)
    assert await session.next_event() is None


@pytest.mark.parametrize(("start", "query", "expected"), [
    (StartFrom.LATEST, "SHOW MASTER STATUS", BinlogPosition("bin.000007", 1234)),
    (StartFrom.EARLIEST, "SHOW BINARY LOGS", BinlogPosition("bin.000002", 4)),
])
async def test_resolved_start_points(start, query, expected):
    conn = FakeConnection([])
    session = await ReplicationSession.start(conn, SessionOptions(server_id=5, start=start))
    assert query in conn.statements
    assert session.start_position == expected
    assert conn.sent[-1][0].endswith(expected.file.encode())


async def test_gtid_start_points():
    conn = FakeConnection([])
    await ReplicationSession.start(conn, SessionOptions(
        server_id=5, start=GtidPosition.parse("0-1-9,3-1-2"), gtid_ignore_duplicates=True))
    assert "SET @slave_connect_state='0-1-9,3-1-2'" in conn.statements
    assert "SET @slave_gtid_ignore_duplicates=1" in conn.statements
    assert conn.sent[-1][0] == b"\x12" + struct.pack("<IHI", 4, 0, 5)

    conn = FakeConnection([], mariadb=False)
    gtids = GtidSet.parse("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5")
    await ReplicationSession.start(conn, SessionOptions(server_id=5, start=gtids,
                                                        non_blocking=True))
    assert any(s.startswith("SET @replica_uuid=") for s in conn.statements)
    dump = conn.sent[-1][0]
    assert dump[0] == 0x1E and dump[1:3] == b"\x01\x00" and dump.endswith(gtids.encode())
    with pytest.raises(ValueError):
        await ReplicationSession.start(FakeConnection([]), SessionOptions(server_id=5,
                                                                          start=gtids))


async def test_server_refused_before_registering():
    conn = FakeConnection([], variables=[("server_id", "1"), ("log_bin", "OFF")])
    with pytest.raises(errors.BinlogNotEnabled):
        await ReplicationSession.start(conn, SessionOptions(server_id=5))
    assert not conn.sent


async def test_register_error_is_typed():
    conn = FakeConnection([])
    conn._registered = True  # the fake's OK is skipped: the next packet is this ERR
    conn.packets = [b"\xff\xcb\x04#HY000Access denied; you need (at least one of) the "
                    b"REPLICATION SLAVE privilege(s) for this operation"]
    with pytest.raises(errors.MissingPrivilege, match="grant"):
        await ReplicationSession.start(conn, SessionOptions(server_id=5))


async def test_stall_is_reported(autojump_clock):
    conn = FakeConnection([ok(rotate("bin.000001", 4)), None])
    session = await ReplicationSession.start(conn, SessionOptions(
        server_id=5, start=BinlogPosition("bin.000001", 4), heartbeat_period=3))
    assert session.stall_timeout == 6
    await session.next_event()
    start = trio.current_time()
    with pytest.raises(HeartbeatTimeout, match="6.0 s"):
        await session.next_event()
    assert trio.current_time() - start == pytest.approx(6)


def transaction(start: int, zero_log_pos: bool) -> tuple[list[bytes], int]:
    """GTID, TABLE_MAP, WRITE_ROWS, XID from ``start``; log_pos 0 inside (MariaDB 11.4+)."""
    sizes = [42, 50, 60, 31]
    bodies = [bytes(s - 23) for s in sizes]
    events, pos = [], start
    for i, (type_code, body) in enumerate(zip((162, 19, 23, 16), bodies, strict=True)):
        pos += sizes[i]
        inside = zero_log_pos and i < 3
        events.append(event(type_code, body, 0 if inside else pos))
    return events, pos


@pytest.mark.parametrize("zero_log_pos", [False, True])
async def test_semi_sync_acks_after_land(zero_log_pos):
    trx1, end1 = transaction(256, zero_log_pos)
    packets = [ok(rotate("bin.000004", 4), False), ok(fde(256), False)]
    packets += [ok(e, i == 3) for i, e in enumerate(trx1)]
    packets += [ok(rotate("bin.000005", 4, fake=False), False), ok(fde(), False)]
    packets += [ok(e, i == 3) for i, e in enumerate(transaction(256, zero_log_pos)[0])]
    packets.append(EOF)
    conn = FakeConnection(packets)
    session = await ReplicationSession.start(conn, SessionOptions(
        server_id=5, start=BinlogPosition("bin.000004", 4), semi_sync=SemiSyncMode.ACK_AFTER_LAND))
    assert session.semi_sync and "SET @rpl_semi_sync_slave=1" in conn.statements
    flagged = [e async for e in session if e.ack_requested]
    assert len(flagged) == 2
    first, second = BinlogPosition("bin.000004", end1), BinlogPosition("bin.000005", end1)
    assert session.pending_acks == (first, second)
    # acknowledging an earlier position than any request sends nothing
    assert not await session.ack(BinlogPosition("bin.000004", 100))
    assert await session.ack(first)
    payload, seq = conn.sent[-1]
    assert seq == 0 and payload == b"\xef" + struct.pack("<Q", end1) + b"bin.000004"
    assert await session.ack(second) and session.acks_sent == 2
    assert not session.pending_acks
    # the master restarts numbering after a flagged event: next expected id is 1 again
    assert conn._codec.sequence == 1


async def test_semi_sync_ack_on_receive_and_unknown_master():
    trx, end = transaction(256, True)
    conn = FakeConnection([ok(rotate("bin.000004", 256), False)]
                          + [ok(e, i == 3) for i, e in enumerate(trx)] + [EOF])
    session = await ReplicationSession.start(conn, SessionOptions(
        server_id=5, start=BinlogPosition("bin.000004", 256),
        semi_sync=SemiSyncMode.ACK_ON_RECEIVE))
    [e async for e in session]
    assert session.acks_sent == 1 and not session.pending_acks
    assert conn.sent[-1] == (b"\xef" + struct.pack("<Q", end) + b"bin.000004", 0)

    # semi-sync asked for, but the master has it off: no header expected
    no_semi = [v for v in VARIABLES if not v[0].startswith("rpl_semi")]
    conn = FakeConnection([ok(rotate("bin.000004", 4)), EOF], variables=no_semi)
    session = await ReplicationSession.start(conn, SessionOptions(
        server_id=5, start=BinlogPosition("bin.000004", 4),
        semi_sync=SemiSyncMode.ACK_ON_RECEIVE))
    assert not session.semi_sync
    assert [bytes(e.data)[4] async for e in session] == [4]


async def test_error_mid_stream_is_typed():
    conn = FakeConnection([ok(rotate("bin.000004", 4)),
                           b"\xff\xc4\x04#HY000Could not find first log file name in binary "
                           b"log index file"])
    session = await ReplicationSession.start(conn, SessionOptions(
        server_id=5, start=BinlogPosition("bin.000004", 4)))
    await session.next_event()
    with pytest.raises(errors.BinlogPositionError):
        await session.next_event()


def test_version_comparison_for_annotate_rows() -> None:
    from replica.core.session import _version_at_least

    assert _version_at_least("11.8.6-MariaDB-0+deb13u1-log", (11, 4))
    assert _version_at_least("5.5.5-11.4.2-MariaDB", (11, 4))
    assert not _version_at_least("10.11.19-MariaDB-0+deb12u1-log", (11, 4))
    assert not _version_at_least("garbage", (11, 4))


@pytest.mark.parametrize("native", [True, False], ids=["native", "python"])
@pytest.mark.parametrize("zero_log_pos", [False, True])
async def test_buffered_events_match_taking_events_one_at_a_time(zero_log_pos, native,
                                                                 monkeypatch):
    """The batch (one call per read) gives the same bytes, positions and packet count as
    next_buffered_event; it ends after a heartbeat (the position is then the heartbeat's)
    and leaves the end of the dump to next_event. Both with the plain events' positions
    followed in C (protocol/_native_frames.c) and in Python."""
    import replica.core.session as session_module

    if not native:
        monkeypatch.setattr(session_module, "_native_end_positions", None)
    elif session_module._native_end_positions is None:
        pytest.skip("protocol._native_frames is not built")
    trx1, _ = transaction(256, zero_log_pos)
    trx2, _ = transaction(256, zero_log_pos)
    heartbeat = event(27, b"bin.000005", 0, 0x20)
    reads: list[bytes | None] = [ok(rotate("bin.000004", 4)), ok(fde(256)),
                                 *map(ok, trx1), ok(heartbeat), ok(rotate("bin.000005", 4, False)),
                                 None, ok(fde()), *map(ok, trx2), EOF]

    async def started() -> ReplicationSession:
        return await ReplicationSession.start(FakeConnection(list(reads)), SessionOptions(
            server_id=5, start=BinlogPosition("bin.000004", 4)))

    one = await started()
    singly: list[tuple[bytes, BinlogPosition]] = []
    while (item := one.next_buffered_event() or await one.next_event()) is not None:
        singly.append((bytes(item.data), one.position))

    many = await started()
    batches: list[list[tuple[bytes, BinlogPosition]]] = []
    while True:
        batch = many.buffered_events()
        if batch:
            batches.append([(bytes(data), many.position) for data in batch])
            continue
        item = await many.next_event()
        if item is None:
            break
        batches.append([(bytes(item.data), many.position)])
    assert [data for batch in batches for data, _ in batch] == [data for data, _ in singly]
    assert many.packets == one.packets == len(singly) + 1  # and the EOF
    # the position after each batch is the one-at-a-time position after its last event
    ends = list(itertools.accumulate(len(batch) for batch in batches))
    assert [batch[-1][1] for batch in batches] == [singly[end - 1][1] for end in ends]
    heartbeat_at = [data for data, _ in singly].index(heartbeat)
    assert heartbeat_at + 1 in ends  # the heartbeat ended its batch
    assert len(batches) == 3  # up to the heartbeat; the ROTATE after it alone; the rest
    assert await many.next_event() is None and many.buffered_events() == []


async def test_no_batches_under_semi_sync():
    conn = FakeConnection([ok(rotate("bin.000004", 4), False), ok(fde(256), False), EOF])
    session = await ReplicationSession.start(conn, SessionOptions(
        server_id=5, start=BinlogPosition("bin.000004", 4), semi_sync=SemiSyncMode.ACK_AFTER_LAND))
    assert session.semi_sync and session.buffered_events() == []
    assert [bytes(e.data)[4] async for e in session] == [4, 15]
