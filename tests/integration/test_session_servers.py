"""The replication session against real servers: start points, rotation, GTIDs in several
domains, MySQL Gtid_sets, semi-sync ACKs, a 40 MB event, heartbeats and the typed errors.

Events are checked at the header level only (type code at offset 4, CRC32 over the rest); the
decoder has its own tests.
"""

from __future__ import annotations

import itertools
import os
import struct
import time
import uuid
import zlib

import pytest
import trio

from protocol import errors
from protocol.binlog.model import BinlogPosition
from protocol.gtid import GtidPosition, GtidSet, MariadbGtid, MysqlGtid, Tsid
from replica.core.connection import Connection, ConnectOptions
from replica.core.session import ReplicationSession, SemiSyncMode, SessionOptions, StartFrom
from tests.servers.handle import ServerHandle

pytestmark = pytest.mark.server

ROTATE, XID, HEARTBEAT = 4, 16, 27
WRITE_ROWS = (23, 30)  # v1 (MariaDB), v2 (MySQL)
MARIADB_GTID, MARIADB_GTID_LIST = 162, 163
MYSQL_GTID = 33

_ids = itertools.count(20000 + os.getpid() % 10000 * 3)


def _server_id() -> int:
    return next(_ids)


def _unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


async def _connect(server: ServerHandle, role: str = "repl") -> Connection:
    user = server.users[role]
    return await Connection.open(ConnectOptions(unix_socket=server.socket,
                                                user=user.name, password=user.password,
                                                tls_ca=server.tls_ca))


async def _start(server: ServerHandle, **options: object) -> ReplicationSession:
    conn = await _connect(server)
    try:
        options.setdefault("server_id", _server_id())
        return await ReplicationSession.start(conn, SessionOptions(**options))  # type: ignore[arg-type]
    except BaseException:
        await conn.close()
        raise


async def _catch_up(server: ServerHandle, **options: object) -> tuple[list[bytes], ReplicationSession]:
    """Dump with NON_BLOCK until the server's EOF; all event bytes."""
    with trio.fail_after(60):
        session = await _start(server, non_blocking=True, **options)
        events = [bytes(e.data) async for e in session]
        await session.close()
    return events, session


def _type(event: bytes) -> int:
    return event[4]


def _crc_ok(event: bytes) -> bool:
    return zlib.crc32(event[:-4]) == struct.unpack_from("<I", event, len(event) - 4)[0]


def _binlog_status(server: ServerHandle) -> BinlogPosition:
    rows = server.sql("SHOW MASTER STATUS" if server.is_mariadb else "SHOW BINARY LOG STATUS")
    return BinlogPosition(str(rows[0][0]), int(str(rows[0][1])))


def _mariadb_gtids(events: list[bytes]) -> list[MariadbGtid]:
    out = []
    for e in events:
        if _type(e) == MARIADB_GTID:
            seq, domain = struct.unpack_from("<QI", e, 19)
            out.append(MariadbGtid(domain, struct.unpack_from("<I", e, 5)[0], seq))
    return out


def _mysql_gtids(events: list[bytes]) -> list[MysqlGtid]:
    out = []
    for e in events:
        if _type(e) == MYSQL_GTID:
            u = uuid.UUID(bytes=e[20:36])
            (gno,) = struct.unpack_from("<q", e, 36)
            out.append(MysqlGtid(Tsid(u), gno))
    return out


@pytest.fixture(params=["mariadb_10_11", "mariadb_11_8", "mysql_9_7"])
def server(request: pytest.FixtureRequest) -> ServerHandle:
    handle: ServerHandle = request.getfixturevalue(request.param)
    return handle


@pytest.fixture(params=["mariadb_10_11", "mariadb_11_8"])
def mariadb(request: pytest.FixtureRequest) -> ServerHandle:
    handle: ServerHandle = request.getfixturevalue(request.param)
    return handle


def _make_table(server: ServerHandle) -> str:
    table = _unique("t")
    server.sql(f"CREATE DATABASE IF NOT EXISTS binlake_s4; "
               f"CREATE TABLE binlake_s4.{table} (id INT PRIMARY KEY, v LONGBLOB)")
    return f"binlake_s4.{table}"


# --- start points and rotation ---------------------------------------------------------------------


async def test_file_position_across_rotation(server: ServerHandle) -> None:
    table = _make_table(server)
    start = _binlog_status(server)
    server.sql(f"INSERT INTO {table} VALUES (1, 'a')")
    server.sql("FLUSH BINARY LOGS")
    server.sql(f"INSERT INTO {table} VALUES (2, 'b')")
    end = _binlog_status(server)
    assert end.file != start.file

    events, session = await _catch_up(server, start=start)
    assert session.start_position == start
    assert all(_crc_ok(e) for e in events)
    rotations = [e for e in events if _type(e) == ROTATE]
    assert len(rotations) >= 2  # the fake one at the start, the real one at the end of the file
    assert sum(_type(e) in WRITE_ROWS for e in events) == 2
    assert session.position == end  # file and end position tracked across the rotation


async def test_latest_and_earliest(server: ServerHandle) -> None:
    table = _make_table(server)
    server.sql(f"INSERT INTO {table} VALUES (1, 'a')")
    events, session = await _catch_up(server, start=StartFrom.LATEST)
    assert not [e for e in events if _type(e) in WRITE_ROWS]
    assert session.start_position == _binlog_status(server)
    _, oldest = await _catch_up(server, start=StartFrom.EARLIEST)
    assert oldest.start_position is not None and oldest.start_position.pos == 4
    assert oldest.position == _binlog_status(server)


async def test_mariadb_gtid_start_several_domains(mariadb: ServerHandle) -> None:
    table = _make_table(mariadb)
    mariadb.sql(f"INSERT INTO {table} VALUES (1, 'd0')")
    mariadb.sql(f"SET gtid_domain_id=7; INSERT INTO {table} VALUES (2, 'd7')")
    position = GtidPosition.parse(str(mariadb.sql("SELECT @@gtid_binlog_pos")[0][0]))
    assert {0, 7} <= set(position.domains)
    mariadb.sql("FLUSH BINARY LOGS")
    mariadb.sql(f"INSERT INTO {table} VALUES (3, 'd0')")
    mariadb.sql(f"SET gtid_domain_id=7; INSERT INTO {table} VALUES (4, 'd7'), (5, 'd7')")
    after = GtidPosition.parse(str(mariadb.sql("SELECT @@gtid_binlog_pos")[0][0]))

    events, session = await _catch_up(mariadb, start=position)
    assert session.start_position is None
    gtids = _mariadb_gtids(events)
    assert [g for g in gtids if g.domain in (0, 7)] == [after.get(0), after.get(7)]
    assert sum(_type(e) in WRITE_ROWS for e in events) == 2
    assert all(_crc_ok(e) for e in events)
    assert session.position == _binlog_status(mariadb)


async def test_mysql_gtid_set_start(mysql_9_7: ServerHandle) -> None:
    table = _make_table(mysql_9_7)
    mysql_9_7.sql(f"INSERT INTO {table} VALUES (1, 'a')")
    executed = GtidSet.parse(str(mysql_9_7.sql("SELECT @@gtid_executed")[0][0]))
    mysql_9_7.sql("FLUSH BINARY LOGS")
    mysql_9_7.sql(f"INSERT INTO {table} VALUES (2, 'b')")
    mysql_9_7.sql(f"INSERT INTO {table} VALUES (3, 'c')")
    now = GtidSet.parse(str(mysql_9_7.sql("SELECT @@gtid_executed")[0][0]))

    events, session = await _catch_up(mysql_9_7, start=executed)
    got = GtidSet(_mysql_gtids(events))
    assert got == now - executed and got.count() == 2
    assert sum(_type(e) in WRITE_ROWS for e in events) == 2
    assert all(_crc_ok(e) for e in events)


# --- errors ----------------------------------------------------------------------------------------


async def test_wrong_start_positions(server: ServerHandle) -> None:
    current = _binlog_status(server)
    with pytest.raises(errors.BinlogPositionError) as info:
        await _catch_up(server, start=BinlogPosition("mysql-bin.999999", 4))
    assert "SHOW BINARY LOGS" in str(info.value)
    with pytest.raises(errors.BinlogPositionError):
        await _catch_up(server, start=BinlogPosition(current.file, current.pos + 1_000_000))


async def test_purged_gtid(server_factory) -> None:
    server = server_factory.start("mariadb-10.11", name="s4-purge")
    table = _make_table(server)
    server.sql(f"INSERT INTO {table} VALUES (1, 'a')")
    old = GtidPosition.parse(str(server.sql("SELECT @@gtid_binlog_pos")[0][0]))
    server.sql("FLUSH BINARY LOGS")
    server.sql(f"INSERT INTO {table} VALUES (2, 'b')")
    # MariaDB keeps a binlog until its binlog checkpoint moved on: rotate until it can go
    for _attempt in range(20):
        server.sql("FLUSH BINARY LOGS")
        current = _binlog_status(server).file
        server.sql(f"PURGE BINARY LOGS TO '{current}'")
        if server.sql("SHOW BINARY LOGS")[0][0] == current:
            break
        time.sleep(0.2)
    with pytest.raises(errors.GtidPurged) as info:
        await _catch_up(server, start=old)
    assert "purged" in str(info.value) and info.value.code == 1236
    # a GTID the server never had
    never = GtidPosition([MariadbGtid(0, 4242, 1)])
    with pytest.raises((errors.GtidNotInBinlog, errors.GtidDiverged, errors.GtidPurged)):
        await _catch_up(server, start=never)


async def test_duplicate_server_id(mariadb_10_11: ServerHandle) -> None:
    server_id = _server_id()
    with trio.fail_after(30):
        first = await _start(mariadb_10_11, server_id=server_id, heartbeat_period=1)
        second = await _start(mariadb_10_11, server_id=server_id, heartbeat_period=1)
        try:
            with pytest.raises(errors.DuplicateServerId) as info:
                while True:
                    await first.next_event()
            assert "server_id" in str(info.value)
        finally:
            await first.close()
            await second.close()


async def test_server_id_equal_to_the_servers(mariadb_10_11: ServerHandle) -> None:
    conn = await _connect(mariadb_10_11)
    with pytest.raises(errors.ServerIdConflict):
        await ReplicationSession.start(conn, SessionOptions(server_id=mariadb_10_11.server_id))
    await conn.close()


# --- heartbeats ------------------------------------------------------------------------------------


async def test_heartbeats_on_an_idle_server(mariadb_10_11: ServerHandle) -> None:
    session = await _start(mariadb_10_11, start=StartFrom.LATEST, heartbeat_period=0.5)
    arrivals = []
    with trio.fail_after(10):
        while len(arrivals) < 4:
            event = await session.next_event()
            assert event is not None
            if _type(bytes(event.data)) == HEARTBEAT:
                arrivals.append(time.monotonic())
    await session.close()
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    assert all(0.3 < gap < 0.9 for gap in gaps), gaps


# --- semi-sync ----------------------------------------------------------------------------------


@pytest.fixture
def semi_sync_server(server_factory) -> ServerHandle:
    return server_factory.start(
        "mariadb-10.11",
        ["--rpl-semi-sync-master-enabled=ON", "--rpl-semi-sync-master-timeout=2000"],
        name="s4-semi-sync")


def _yes_tx(server: ServerHandle) -> int:
    return int(str(server.sql("SHOW GLOBAL STATUS LIKE 'Rpl_semi_sync_master_yes_tx'")[0][1]))


async def _timed_commit(server: ServerHandle, table: str, row: int, done: list[float]) -> None:
    def commit() -> None:
        t = time.monotonic()
        server.sql(f"INSERT INTO {table} VALUES ({row}, 'x')")
        done.append(time.monotonic() - t)
    await trio.to_thread.run_sync(commit)


async def _stream_until_commit(session: ReplicationSession, server: ServerHandle, table: str,
                               row: int, on_flagged=None) -> float:
    done: list[float] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_timed_commit, server, table, row, done)
        with trio.fail_after(20):
            while not done:
                with trio.move_on_after(0.2):
                    event = await session.next_event()
                    if event is not None and event.ack_requested and on_flagged is not None:
                        await on_flagged(session)
    return done[0]


async def test_semi_sync_ack_on_receive(semi_sync_server: ServerHandle) -> None:
    table = _make_table(semi_sync_server)
    session = await _start(semi_sync_server, semi_sync=SemiSyncMode.ACK_ON_RECEIVE,
                           heartbeat_period=1)
    assert session.semi_sync
    before = _yes_tx(semi_sync_server)
    took = await _stream_until_commit(session, semi_sync_server, table, 1)
    await session.close()
    assert took < 1.0 and session.acks_sent >= 1
    assert _yes_tx(semi_sync_server) > before


async def test_semi_sync_ack_after_land(semi_sync_server: ServerHandle) -> None:
    table = _make_table(semi_sync_server)
    session = await _start(semi_sync_server, semi_sync=SemiSyncMode.ACK_AFTER_LAND,
                           heartbeat_period=1)

    async def land_and_ack(s: ReplicationSession) -> None:
        (pending,) = s.pending_acks
        assert await s.ack(pending)
        assert not s.pending_acks and not await s.ack(pending)

    before = _yes_tx(semi_sync_server)
    took = await _stream_until_commit(session, semi_sync_server, table, 1, land_and_ack)
    assert took < 1.0 and _yes_tx(semi_sync_server) > before

    # ACKs withheld: the commit waits for the master's timeout (2 s), then goes on async
    took = await _stream_until_commit(session, semi_sync_server, table, 2)
    assert took >= 1.8
    await session.close()


# --- large events --------------------------------------------------------------------------------


async def test_40mb_row_event(server_factory) -> None:
    server = server_factory.start("mariadb-10.11", ["--max-allowed-packet=256M"], name="s4-big")
    table = _make_table(server)
    start = _binlog_status(server)
    server.sql(f"INSERT INTO {table} VALUES (1, REPEAT('z', 40 * 1024 * 1024))")
    events, session = await _catch_up(server, start=start)
    (rows,) = [e for e in events if _type(e) in WRITE_ROWS]
    assert len(rows) > 40 * 1024 * 1024
    assert struct.unpack_from("<I", rows, 9)[0] == len(rows)
    assert _crc_ok(rows)
    assert session.position == _binlog_status(server)




async def test_missing_replication_privilege(server: ServerHandle) -> None:
    name, password = _unique("noslave"), "Pw-" + uuid.uuid4().hex
    server.sql(f"CREATE USER '{name}'@'%' IDENTIFIED BY '{password}'; "
               f"GRANT SELECT ON *.* TO '{name}'@'%'")
    conn = await Connection.open(ConnectOptions(unix_socket=server.socket, user=name,
                                                password=password))
    try:
        with pytest.raises(errors.MissingPrivilege) as info:
            await ReplicationSession.start(conn, SessionOptions(server_id=_server_id()))
        assert "REPLICATION SLAVE" in str(info.value)
    finally:
        await conn.close()
        server.sql(f"DROP USER '{name}'@'%'")


async def test_binlog_format_not_row(server_factory) -> None:
    server = server_factory.start("mariadb-10.11", ["--binlog-format=MIXED"], name="s4-mixed")
    with pytest.raises(errors.BinlogFormatNotRow, match="binlog_format=ROW"):
        await _catch_up(server)
    events, _ = await _catch_up(server, allow_statement_format=True)
    assert events
